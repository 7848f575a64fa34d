"""A reply's openers said before, kept: they come back at once, for no compute.

Agent replies open with the same few words ("Sure!", "Hmm,", "Let me check that for you."),
and a turn's first segment is cut short on purpose, so the same first segment, with the same
voice and options, is synthesized again and again. When conversations start together their
first segments take the lanes at once and the next segments wait behind them: that is where a
burst's listeners run dry. The worker keeps what each short first segment gave (its audio and
word starts, in order) and gives it again to the next turn opening with the same text and
options, without queueing it. Only first segments: later ones repeat where whole replies do
(a benchmark's), and replaying them moved a burst's compute from its start to its middle,
all sessions at once, past what the worker's queue had told them (bursts of 16, two runs: 2
of 64 conversations stalled, at the fourth segment, against none). Kokoro's audio is a
function of its input, so a replay is what the engine would make; Piper's draws noise, so a
replay is one of the renderings it could make. Bounded by the samples kept, least recently
used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..engines.base import SynthesisOptions
from .jobs import JobAudio, JobEvent, JobWords

MAX_CHARS = 40
"""Characters of text above which a segment is not kept: a clause or two, where repeats are."""

Key = tuple[str, SynthesisOptions]


class PhraseCache:
    """``max_samples``: the audio kept, at most (0: nothing is)."""

    def __init__(self, max_samples: int) -> None:
        self.max_samples = max_samples
        self.samples = 0
        self.hits = 0
        self._kept: OrderedDict[Key, tuple[JobEvent, ...]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str, options: SynthesisOptions) -> Key | None:
        """The key of a synthesis worth keeping; None for one too long to come again."""
        return (text, options) if len(text) <= MAX_CHARS else None

    def get(self, key: Key) -> list[JobEvent] | None:
        """What the synthesis gave, each chunk a copy (:func:`copied`), or None."""
        with self._lock:
            events = self._kept.get(key)
            if events is None:
                return None
            self._kept.move_to_end(key)
            self.hits += 1
        return [copied(event, replay=True) for event in events]

    def put(self, key: Key, events: list[JobEvent]) -> None:
        """A synthesis of ``key`` gave ``events`` (audio and word starts) and ended."""
        size = sum(e.audio.size for e in events if isinstance(e, JobAudio))
        if size > self.max_samples or not size:
            return
        kept = tuple(e for e in events if isinstance(e, JobAudio | JobWords))
        with self._lock:
            if key in self._kept:
                return
            self._kept[key] = kept
            self.samples += size
            while self.samples > self.max_samples:
                _, dropped = self._kept.popitem(last=False)
                self.samples -= sum(e.audio.size for e in dropped if isinstance(e, JobAudio))

    def __len__(self) -> int:
        return len(self._kept)


def copied(event: JobEvent, replay: bool = False) -> JobEvent:
    """``event``, its audio copied: the session's stitcher may fade a chunk in place."""
    return JobAudio(event.audio.copy(), replay) if isinstance(event, JobAudio) else event
