"""How fast a conversation's text arrives, from its deltas' times: characters a second, as
written and as spoken.

A voice agent's text comes as fast as its language model writes it: 50 tokens a second on a
quiet GPU, 5 on a loaded one or behind a slow network. Pacing sizes the audio it keeps in hand
from this (``Pacing.start_lead``): at 5 tokens a second the next few words take about as long
to arrive as to say, and cutting each as it comes is heard as a list of words. Written
characters are what a cut waits for (a price streamed a digit a token is one word, ten tokens
long); spoken ones (``segmenter.spoken_length``) are what the listener hears.

Pure: the caller passes the time. Each rate is a ratio of exponentially decayed sums (what came
over the seconds it took), so deltas arriving in one instant add without a division by
nothing, and a slow stretch weighs as long as it lasted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..text.segmenter import spoken_length

HALF_LIFE = 1.5
"""Seconds of arrival in which what came before counts half: the last few words' rate."""
MAX_GAP = 1.0
"""The most one gap between deltas counts for: a model calling a tool stops for seconds, which
says little of how fast it writes once it writes again (the idle flush speaks what it has)."""
PRIOR_WEIGHT = 0.1
"""Seconds the prior counts for: two deltas at 5 tokens a second outweigh it, one at 20 does not."""


@dataclass(frozen=True, slots=True)
class Rates:
    written: float
    """Characters a second, as written."""
    spoken: float
    """Characters a second, as spoken (``segmenter.spoken_length``)."""


PRIOR = Rates(written=80.0, spoken=95.0)
"""Before any is measured: about 25 tokens a second of the bench's replies (2.7-3.4 written
characters a word piece, 3.6-4.5 spoken)."""


class Arrival:
    """One conversation's text rates; kept across its turns (the same model writes them), with
    the pause between turns left out."""

    def __init__(self, prior: Rates = PRIOR, weight: float = PRIOR_WEIGHT) -> None:
        self._written = prior.written * weight
        self._spoken = prior.spoken * weight
        self._seconds = weight
        self._last: float | None = None
        self._seen = [0.0, 0.0, 0.0]  # written, spoken, seconds: the deltas' alone
        self.measured = False
        """A delta has come after another of its turn (``seen`` has a figure)."""

    def turn_started(self) -> None:
        """A new turn: the time since the last delta of the previous one is not arrival."""
        self._last = None

    def delta(self, text: str, now: float) -> None:
        """``text`` came at ``now``. A turn's first delta only starts the clock: when it was
        written is not known."""
        if self._last is None:
            self._last = now
            return
        gap = min(max(0.0, now - self._last), MAX_GAP)
        decay = 0.5 ** (gap / HALF_LIFE)
        self._written = self._written * decay + len(text)
        self._spoken = self._spoken * decay + spoken_length(text)
        self._seconds = self._seconds * decay + gap
        written, spoken, seconds = self._seen
        self._seen = [written * decay + len(text), spoken * decay + spoken_length(text)]
        self._seen.append(seconds * decay + gap)
        self._last, self.measured = now, True

    @property
    def seen(self) -> Rates | None:
        """Characters a second lately, from the deltas alone, without the prior (None before
        a delta has come after another; deltas in one instant: as fast as can be). Two
        deltas at 5 tokens a second tell 20 characters a second, where ``rates`` says 40."""
        if not self.measured:
            return None
        written, spoken, seconds = self._seen
        if seconds <= 0.0:
            return Rates(math.inf, math.inf)
        return Rates(written / seconds, spoken / seconds)

    @property
    def rates(self) -> Rates:
        """Characters a second, lately."""
        return Rates(self._written / self._seconds, self._spoken / self._seconds)
