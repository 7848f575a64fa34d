"""The real-time listener: starts at the first audio, plays in real time, waits when dry.

One model of what a listener hears, wherever there is no real player to ask: the session's
stall guard and stall metrics, the client's ``SpokenTurn.stall``, and the agent's sinks (how
much of a reply was heard at a barge-in). Audio that arrives late does not play early, so a
stall pushes the rest back. Pure: the caller passes the time.
"""

from __future__ import annotations


class ListenerClock:
    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.received = 0
        """Samples added so far."""
        self.end: float | None = None
        """When the audio received so far will have played out; None before any."""

    @property
    def started(self) -> bool:
        return self.end is not None

    def add(self, samples: int, now: float) -> float:
        """Audio arrives at ``now``; returns how long the listener had been waiting for it,
        with nothing left to play (0 for the first audio: playing starts with it)."""
        waited = 0.0 if self.end is None else max(0.0, now - self.end)
        start = now if self.end is None else max(self.end, now)
        self.end = start + samples / self.sample_rate
        self.received += samples
        return waited

    def left(self, now: float) -> float:
        """Seconds of received audio not yet played at ``now``."""
        return 0.0 if self.end is None else max(0.0, self.end - now)

    def played(self, now: float) -> int:
        """Samples played by ``now``."""
        return max(0, self.received - round(self.left(now) * self.sample_rate))
