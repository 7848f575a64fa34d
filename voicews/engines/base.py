"""The engine contract: one text segment in, float audio chunks out. Nothing about sockets."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..audio import Audio


@dataclass(frozen=True, slots=True)
class SynthesisOptions:
    speed: float = 1.0
    """Speaking rate: 2.0 is twice as fast."""
    voice: str | None = None
    """One of the engine's voices (``engine_voices``); None: the one the engine was built with."""
    chunk_frames: int | None = None
    """For engines that decode in windows: latent frames per window (None: the engine's)."""
    overlap_frames: int | None = None
    """For engines that decode in windows: frames of context shared by adjacent windows."""
    eager: bool = False
    """A listener waits on this audio (a turn's first segment): an engine that can give its
    first audio sooner for a little more compute (Piper: its first window) does so."""
    lean: bool = False
    """Listeners wait for the worker: an engine that can give the same words for less compute
    and a little of their sound (Kokoro: the silence after each piece's last sound left
    unrendered, :mod:`voicews.engines.kokoro.timing`) does so. Also when ``eager``."""
    then: str = ""
    """The word the sentence goes on with after this text (a segment cut mid-sentence): an
    engine that can place words (Piper) says it too, so that the text ends as its sentence
    goes on rather than with a statement's falling end, and cuts it off where it starts.
    Others ignore it."""


@dataclass(frozen=True, slots=True)
class WordStarts:
    """Where each whitespace-separated word of the synthesized text starts, in samples from the
    start of the engine's audio for that text. Engines that know phoneme durations yield it
    once: just before the last chunk of audio, where they know the words by then (the chunk
    then ends the synthesis, and the worker runs it to its end in the same step), or after
    the audio. The session maps it onto the turn's stream."""

    samples: tuple[int, ...]


class Engine(Protocol):
    """A speech engine owned by the compute worker: used from its one thread, or from its
    lanes' threads where the engine is ``concurrent``."""

    name: str
    sample_rate: int
    device: str
    """Where it computes, for the server's log: ``cpu (onnxruntime 1.32.0:
    CPUExecutionProvider)``, ``gpu (cuda: NVIDIA H200)``, ``cpu`` (MLX's CPU backend)."""
    concurrent: bool
    """``synthesize`` may run on several threads at once (the worker's lanes)."""

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        """Yield mono float32 chunks in [-1, 1] as they are computed (and, optionally, the
        words' start samples).

        The worker checks for cancellation between chunks, so an engine that can stream
        (chunked decoding) should yield early and often.
        """
        ...


@dataclass(frozen=True, slots=True)
class Window:
    """One stream's ready decoder window: frames ``[start, end)`` of a sentence's decoder input
    ``z`` (``(frames, channels)``, on the host), decoded on its own, so windows of several
    streams can be stacked and decoded in one step."""

    z: npt.NDArray[np.float32]
    start: int
    end: int

    @property
    def frames(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Begin:
    """A stream about to begin a sentence: what the engine makes its decoder input from. A
    stream yields it (``WindowedEngine.windows_of``) and is sent the input back, made with
    other streams' sentences in one batch (:meth:`WindowedEngine.begin`); sent None (or
    simply iterated), it makes its own."""

    sentence: object


Windows = Generator["Window | Audio | WordStarts | Begin", object | None, None]
"""What ``WindowedEngine.windows_of`` yields, and is sent back for a :class:`Begin`."""


@runtime_checkable
class WindowedEngine(Engine, Protocol):
    """An engine whose decoder steps the ready windows of many streams at once (a GPU's): the
    compute worker gathers them across sessions (``compute/batch_lane.py``)."""

    batched: bool
    """Whether the worker should gather windows at all (the decoder it runs is batched)."""
    max_batch: int
    """Windows decoded in one step, at most."""
    batch_wait: float
    """Seconds the most urgent window waits for others to join its batch, at most."""

    def begin(self, sentences: Sequence[object]) -> Sequence[object]:
        """The decoder inputs of sentences that streams begin together (their
        :attr:`Begin.sentence`), in order, made in one batch (a GPU's: the encoder, durations
        and flow, whose operations it dispatches once for all of them)."""
        ...

    def windows_of(self, text: str, options: SynthesisOptions) -> Windows:
        """What ``synthesize`` gives, each chunk of audio left as the window to decode (or,
        for options its windows cannot serve, the audio itself), each sentence announced by a
        :class:`Begin` before its first window."""
        ...

    def window_bucket(self, frames: int) -> int:
        """The length a window of ``frames`` is padded to: only windows of one bucket stack."""
        ...

    def decode_windows(self, windows: Sequence[Window]) -> list[Audio]:
        """Each window's audio, in order, decoded together."""
        ...


@runtime_checkable
class SoundingEngine(Engine, Protocol):
    """An engine that can say which of a synthesis' options change its audio: syntheses whose
    text and sounding options agree sound alike (the worker's phrase cache is keyed by them)."""

    def sounding(self, options: SynthesisOptions) -> SynthesisOptions:
        """``options`` with those this engine ignores, or that change nothing it gives, left
        at one value."""
        ...


@runtime_checkable
class WarmingEngine(Engine, Protocol):
    """An engine whose first inferences compile kernels (MLX on a GPU: 10-14 s): the worker
    warms it before serving, while ``/readyz`` says ``warming``."""

    def warm(self) -> float:
        """Run the shapes synthesis will use once; the seconds it took."""
        ...
