"""A compute job: the work it runs step by step, when it is due, and whose compute it is."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import assert_never

import numpy as np

from ..audio import Audio
from ..engines.base import Begin, Engine, SynthesisOptions, Window, WordStarts

FIRST_AUDIO_TARGET = 0.2
"""Seconds after a turn's first segment is asked for that it is due: a listener who will run
dry sooner goes first."""
ALLOWANCE = 5.0
"""Seconds of audio an account may be given beyond what a real-time listener could have heard
before its jobs wait (about a long sentence, so a barge-in now and then costs nothing)."""


@dataclass(frozen=True, slots=True)
class JobAudio:
    audio: Audio
    replay: bool = False
    """Given again from the phrase cache (``phrases``): it tells nothing of the compute."""


@dataclass(frozen=True, slots=True)
class JobText:
    """A text delta from a generation job (an LLM reply, in agent mode)."""

    text: str


@dataclass(frozen=True, slots=True)
class JobWords:
    """Where the segment's words start in its audio (from engines that know)."""

    starts: WordStarts


@dataclass(frozen=True, slots=True)
class JobDone:
    pass


@dataclass(frozen=True, slots=True)
class JobFailed:
    message: str


JobEvent = JobAudio | JobText | JobWords | JobDone | JobFailed
Work = Callable[[Engine], Iterator["Audio | WordStarts | str"]]
"""What a job runs on the compute thread: a generator of audio chunks and word starts (a
segment's synthesis) or of text deltas (a reply's generation), advanced one item per step."""


@dataclass(frozen=True, slots=True)
class Synthesis:
    """The work of speaking ``text``: a worker that gathers decoder windows across sessions
    (``batch_lane.py``) reads the text and options to ask the engine for windows instead."""

    text: str
    options: SynthesisOptions

    def __call__(self, engine: Engine) -> Iterator[Audio | WordStarts]:
        return engine.synthesize(self.text, self.options)


def synthesis(text: str, options: SynthesisOptions) -> Work:
    """The work of speaking ``text``."""
    return Synthesis(text, options)


def event_of(item: Audio | WordStarts | str) -> JobEvent:
    """What one item a job's work yielded tells its session."""
    match item:
        case str():
            return JobText(item)
        case WordStarts():
            return JobWords(item)
        case np.ndarray():
            return JobAudio(item)
        case _:
            assert_never(item)


@dataclass(eq=False)
class Account:
    """Whose compute a job is: one session, or all one-shot requests together."""

    clock: float = -math.inf
    """When a real-time listener would have heard all the audio the account's compute was
    worth (``time.monotonic``)."""

    def charge(self, ended: float, worth: float) -> None:
        """A step that ended at ``ended`` took compute worth ``worth`` seconds of audio."""
        self.clock = max(self.clock, ended) + worth


@dataclass(eq=False)
class Job:
    """One piece of work for the compute thread; ``on_event`` is called on that thread."""

    run: Work
    deadline: float
    """When the listener runs dry (``time.monotonic``, the event loop's clock); for a first
    segment, when it was asked for. Each step's audio moves it on as the listener's end."""
    on_event: Callable[[JobEvent], None]
    first: bool = False
    """A turn's first segment: due ``FIRST_AUDIO_TARGET`` after its deadline."""
    account: Account | None = None
    """Whose compute it is; None: nobody's, never held back."""
    deadline_step: float = 0.0
    """Added to ``deadline`` after each step: a long generation yields to segments whose
    listeners run dry sooner, instead of holding its place."""
    chars: int = 0
    """A segment's spoken length (``segmenter.spoken_length``): the compute to its first audio
    teaches the engine's cost model (0: not a segment)."""
    pinned: bool = False
    """Every step, and the close, on the lane that ran its first: its generator holds state
    bound to that thread (mlx-lm's stream context, which fails when closed on another)."""
    cancelled: bool = False
    _lane: int | None = field(default=None, repr=False)  # the thread it is pinned to
    _steps: Iterator[Audio | WordStarts | str | Window | Begin] | None = field(
        default=None, repr=False
    )
    _submitted: float = field(default=0.0, repr=False)
    _sounded: bool = field(default=False, repr=False)
    _computed: float = field(default=0.0, repr=False)  # lane-seconds of its steps so far
    _phrase: tuple[str, SynthesisOptions] | None = field(default=None, repr=False)
    """Its text and options, where what it gives is kept (``phrases.PhraseCache``)."""
    _gave: list[JobEvent] = field(default_factory=list, repr=False)  # what it gave, so far

    def due(self) -> float:
        """When it should give its first output; the job due first runs next."""
        due = self.deadline + (FIRST_AUDIO_TARGET if self.first else 0.0)
        if self.account is not None:
            due = max(due, self.account.clock - ALLOWANCE)
        return due

    def gave(self, ended: float, audio_seconds: float) -> None:
        """A step gave ``audio_seconds`` of audio at ``ended``: the listener has that much more
        to hear before the next step is needed."""
        plays_from = ended if self.first else max(self.deadline, ended)
        self.deadline, self.first = plays_from + audio_seconds, False


def close(job: Job) -> None:
    """Close a cancelled job's generator, on the thread that owns the engine."""
    if isinstance(job._steps, Generator):
        job._steps.close()
