"""What a segment costs the engine: seconds to its first audio, fixed plus per character.

An engine that renders a segment whole (Kokoro) gives nothing before the whole segment is
computed, so the pacing must know what a segment of a given length will take: a fixed part
(an inference's own overhead, paid by every segment) and a part per character. The compute
worker fits both, for all sessions together, from what its jobs took (the recent ones; a job
slowed by a busy machine is an outlier, not the engine), starting from the engine's prior.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cost:
    """Seconds from starting a segment's synthesis to its first audio: ``fixed``, plus
    ``per_char`` for each character."""

    fixed: float
    per_char: float

    def latency(self, chars: int) -> float:
        return self.fixed + self.per_char * chars

    def chars_within(self, seconds: float) -> int:
        """The most characters whose first audio comes within ``seconds`` (-1: not even none)."""
        if seconds < self.fixed:
            return -1
        if self.per_char <= 0:
            return 1 << 30
        return int((seconds - self.fixed) / self.per_char)


PRIORS = {
    "piper": Cost(0.05, 0.004),
    "kokoro": Cost(0.3, 0.02),
}
"""Until measured, per engine (the two-core box this was written on, quiet, a little
pessimistic): Piper ~15 ms of speech per ms of compute. Kokoro's int8 graph fitted 255 ms +
26.9 ms/char there, quiet; its static graph (``engines/kokoro/graphs.py``), which it runs
now, took 0.51-0.79 of that graph's compute per second of audio in three paired runs
(``python -m bench kokoro_ab``, busy machine), and a two-word segment 0.6 of its time."""
DEFAULT_PRIOR = PRIORS["piper"]

FIRST_WORDS = {"kokoro": 1}
"""Words in a turn's first segment when no clause comes sooner, for the engines whose cost
curve warrants other than the segmenter's two. Kokoro's inference costs about 0.5 s however
short (``python -m bench kokoro_cost``, two busy cores: 507 ms + 21.7 ms a character), so a
second word only adds its token's wait and its characters' cost: ``python -m bench ttfa
--engine kokoro --compare-first-words``, two runs in opposite orders, one word against two:
first audio median 456 and 613 against 1207 and 1032 ms, p95 1323 and 988 against 1974 and
1875 ms, stall median 299 and 201 against 759 and 287 ms (largest 1676 and 2300 against 1893
and 1689 ms)."""

WINDOW = 32
"""Samples the fit is taken over: the recent ones, as the machine's load drifts."""
HORIZON = 30.0
"""Seconds a sample counts for: a fit made in a burst of conversations (each inference sharing
the cores) says little of the quiet after it, when the prior is the better guess."""
_QUANTILE = 0.75
"""The fixed part is this quantile of what the slope leaves: a first audio comes within the
estimate three times in four (a segment sharing the CPU with another takes longer)."""
_SPREAD = 10
"""Characters between the shortest and longest sample before they say anything of the cost
per character (until then it is the prior's, and the samples set the fixed part)."""


class CostModel:
    """Theil-Sen's line through the recent ``(chars, seconds)`` samples: the median of the
    slopes between pairs, then an upper quantile of what is left for the fixed part, so
    samples slowed by something else on the machine move neither (while under a quarter)."""

    def __init__(self, prior: Cost = DEFAULT_PRIOR) -> None:
        self.prior = prior
        self._samples: deque[tuple[float, int, float]] = deque(maxlen=WINDOW)
        self._estimate = prior

    def observe(self, chars: int, seconds: float, at: float) -> None:
        """A segment of ``chars`` gave its first audio ``seconds`` of compute after it
        started; ``at``: when (a monotonic clock's seconds)."""
        self._samples.append((at, chars, seconds))
        self._fit()

    def estimate(self, now: float) -> Cost:
        """The cost as fitted over the samples of the last ``HORIZON`` seconds."""
        if self._samples and self._samples[0][0] < now - HORIZON:
            while self._samples and self._samples[0][0] < now - HORIZON:
                self._samples.popleft()
            self._fit()
        return self._estimate

    def _fit(self) -> None:
        samples = [(chars, seconds) for _, chars, seconds in self._samples]
        if not samples:
            self._estimate = self.prior
            return
        slope = self.prior.per_char
        if max(c for c, _ in samples) - min(c for c, _ in samples) >= _SPREAD:
            slopes = [(s2 - s1) / (c2 - c1) for c1, s1 in samples for c2, s2 in samples if c2 > c1]
            slope = max(0.0, statistics.median(slopes))
        rest = sorted(s - slope * c for c, s in samples)
        fixed = max(0.0, rest[int(_QUANTILE * (len(rest) - 1) + 0.5)])
        self._estimate = Cost(fixed, slope)
