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
    "kokoro": Cost(0.4, 0.025),
}
"""Until measured, per engine (the two-core box this was written on, quiet, a little
pessimistic): Piper ~15 ms of speech per ms of compute, Kokoro about ten times its cost."""
DEFAULT_PRIOR = PRIORS["piper"]

WINDOW = 32
"""Samples the fit is taken over: the recent ones, as the machine's load drifts."""
_PRIOR_WEIGHT = 0.5  # each of the prior's two pseudo-samples, against 1 for a measured one
_PRIOR_AT = (0, 100)  # characters where the prior's pseudo-samples stand
_OUTLIER = 3.0  # residuals past this many median residuals are left out of the second fit
_FLOOR = 0.005  # seconds: residuals below this are never outliers


class CostModel:
    """A line through the recent ``(chars, seconds)`` samples and the prior, by least squares;
    then again without the samples far off the first line (a job that shared a busy CPU)."""

    def __init__(self, prior: Cost = DEFAULT_PRIOR) -> None:
        self.prior = prior
        self._samples: deque[tuple[int, float]] = deque(maxlen=WINDOW)
        self.estimate = prior

    def observe(self, chars: int, seconds: float) -> None:
        self._samples.append((chars, seconds))
        samples = list(self._samples)
        first = _fit(samples, self.prior)
        residuals = [abs(s - first.latency(c)) for c, s in samples]
        bound = max(_OUTLIER * statistics.median(residuals), _FLOOR)
        kept = [sample for sample, r in zip(samples, residuals, strict=True) if r <= bound]
        self.estimate = _fit(kept, self.prior)


def _fit(samples: list[tuple[int, float]], prior: Cost) -> Cost:
    """Weighted least squares of seconds on characters, fixed and per-character part >= 0."""
    points = [(float(c), s, 1.0) for c, s in samples]
    points += [(float(c), prior.latency(c), _PRIOR_WEIGHT) for c in _PRIOR_AT]
    w = sum(p[2] for p in points)
    mx = sum(x * wt for x, _, wt in points) / w
    my = sum(y * wt for _, y, wt in points) / w
    sxx = sum(wt * (x - mx) ** 2 for x, _, wt in points)
    sxy = sum(wt * (x - mx) * (y - my) for x, y, wt in points)
    slope = max(0.0, sxy / sxx)  # the prior's two points keep sxx > 0
    fixed = my - slope * mx
    if fixed < 0:  # through the origin instead
        fixed = 0.0
        slope = sum(wt * x * y for x, y, wt in points) / sum(wt * x * x for x, _, wt in points)
    return Cost(fixed, slope)
