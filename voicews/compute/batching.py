"""Which ready windows a GPU engine decodes together next: most urgent first, one bucket.

A GPU decodes a batch of windows in about the time of one (issue 33: 4.6 ms a 64-frame
window alone on an H200, 0.20 ms each in a batch of 64), so the compute worker should step
every active stream's ready window at once rather than one session's at a time. This
gatherer holds each stream's ready window and says when a batch is due and what is in it:
windows of the most urgent window's bucket (the length it is padded to, so one compiled graph
serves the batch), in deadline order, at most ``max_batch``; due at once when full, else when
the most urgent window has waited ``max_wait`` for others to join or its deadline is reached,
whichever is first. While the worker still has streams to step (``pending``: their windows
are moments away), a batch that is not full waits ``max_wait`` for them even past its lead's
deadline: the windows of a burst go together. Sans-I/O: the worker passes the time in and
sleeps until :meth:`due_at`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Ready(Generic[T]):
    """One stream's window, ready to decode."""

    stream: Hashable
    bucket: int
    deadline: float
    """When the stream's listener runs out of audio without this window."""
    arrived: float
    item: T


class Gatherer(Generic[T]):
    """At most one ready window per stream (a stream's next window needs this one's audio)."""

    def __init__(
        self, *, max_batch: int, max_wait: float, bucket: Callable[[int], int] = int
    ) -> None:
        if max_batch < 1 or max_wait < 0:
            raise ValueError("max_batch must be at least 1 and max_wait not negative")
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._bucket = bucket
        self._ready: dict[Hashable, Ready[T]] = {}

    def __len__(self) -> int:
        return len(self._ready)

    def offer(self, stream: Hashable, frames: int, deadline: float, item: T, now: float) -> None:
        """``stream``'s next window, of ``frames`` latent frames, needed by ``deadline``."""
        if stream in self._ready:
            raise ValueError(f"stream {stream!r} already has a window waiting")
        self._ready[stream] = Ready(stream, self._bucket(frames), deadline, now, item)

    def drop(self, stream: Hashable) -> None:
        """Forget ``stream``'s waiting window, if any (its turn was cut, its session ended)."""
        self._ready.pop(stream, None)

    def _next(self, pending: bool) -> tuple[list[Ready[T]], float] | None:
        """The batch the most urgent window leads, and when it is due."""
        if not self._ready:
            return None
        lead = min(self._ready.values(), key=lambda r: (r.deadline, r.arrived))
        peers = sorted(
            (r for r in self._ready.values() if r.bucket == lead.bucket),
            key=lambda r: (r.deadline, r.arrived),
        )[: self.max_batch]
        if len(peers) == self.max_batch:
            return peers, float("-inf")
        waited = lead.arrived + self.max_wait
        return peers, waited if pending else min(waited, lead.deadline)

    def due_at(self, pending: bool = False) -> float | None:
        """When :meth:`take` will next give a batch (``-inf``: now); ``None`` when empty."""
        ahead = self._next(pending)
        return None if ahead is None else ahead[1]

    def take(self, now: float, pending: bool = False) -> list[Ready[T]]:
        """The batch due at ``now``, removed from the waiting windows; empty if none is due.
        ``pending``: more streams' windows are about to be offered."""
        ahead = self._next(pending)
        if ahead is None or now < ahead[1]:
            return []
        for ready in ahead[0]:
            del self._ready[ready.stream]
        return ahead[0]
