"""A token bucket: a sustained rate of client messages, with bursts of one second's worth."""

from __future__ import annotations


class TokenBucket:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._tokens = float(rate)
        self._at: float | None = None

    def take(self, now: float) -> bool:
        """Spend one token; False when there is none (the message is refused)."""
        if self._at is not None:
            self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
