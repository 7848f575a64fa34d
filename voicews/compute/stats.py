"""What the lanes did lately: for metrics, and to say when the worker is overloaded."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OVERLOAD_BUSY = 0.9
"""Share of the lanes' time spent computing over ``WINDOW`` past which the worker is overloaded,
once segments also wait ``OVERLOAD_WAIT`` for it (a worker busy with one long request that
makes no one wait is not)."""
OVERLOAD_WAIT = 0.25
OVERLOAD_LATE = 0.05
"""Share of segments over ``WINDOW`` that came after their listener ran dry, though asked for in
time, past which the worker is overloaded (once there are at least ``_MIN_LATE``)."""
WINDOW = 10.0
_MIN_LATE = 3


@dataclass(frozen=True, slots=True)
class WorkerFigures:
    """What ``/metrics`` and ``/readyz`` read of the worker, at one instant: one value, so a
    front process (``compute/remote.py``) is sent the same figures the worker's own process
    reads."""

    queued: int = 0
    warming: bool = True
    warm_seconds: float = 0.0
    overloaded: bool = False
    busy_ratio: float = 0.0
    late_ratio: float = 0.0
    batches: int = 0
    batched_windows: int = 0
    largest_batch: int = 0
    begun_batches: int = 0
    begun_sentences: int = 0
    phrase_hits: int = 0
    phrases_kept: int = 0


@dataclass(slots=True)
class WorkerStats:
    """What the lanes did over the last ``WINDOW`` seconds, for metrics and readiness."""

    jobs_done: int = 0
    jobs_failed: int = 0
    busy_seconds: float = 0.0
    lanes: int = 1
    batches: int = 0
    """Batched decoder steps (``batch_lane.py``), and the windows they decoded."""
    batched_windows: int = 0
    largest_batch: int = 0
    begun_batches: int = 0
    """Host steps that began several sentences together (their encoders, durations and
    flows in one batch), and the sentences they began."""
    begun_sentences: int = 0
    clock: Callable[[], float] = time.monotonic
    _steps: deque[tuple[float, float]] = field(default_factory=deque, repr=False)
    _segments: deque[tuple[float, bool]] = field(default_factory=deque, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, end: float, lane_seconds: float) -> None:
        """One engine step (on a lane's thread)."""
        with self._lock:
            self.busy_seconds += lane_seconds
            self._steps.append((end, lane_seconds))
            _trim(self._steps, end)

    def sounded(self, at: float, late: bool) -> None:
        """A segment gave its first audio; ``late``: after its listener ran dry, though asked
        for early enough to have made it."""
        with self._lock:
            self._segments.append((at, late))
            _trim(self._segments, at)

    def batched(self, windows: int) -> None:
        """One decoder step decoded ``windows`` sessions' windows together."""
        with self._lock:
            self.batches += 1
            self.batched_windows += windows
            self.largest_batch = max(self.largest_batch, windows)

    def begun(self, sentences: int) -> None:
        """One host step began ``sentences`` together."""
        with self._lock:
            self.begun_batches += 1
            self.begun_sentences += sentences

    def count(self, failed: bool) -> None:
        with self._lock:
            if failed:
                self.jobs_failed += 1
            else:
                self.jobs_done += 1

    def busy_ratio(self) -> float:
        """Share of the lanes' time in the last ``WINDOW`` seconds spent computing."""
        since = self.clock() - WINDOW
        with self._lock:
            busy = sum(seconds for end, seconds in self._steps if end >= since)
        return min(1.0, busy / (WINDOW * self.lanes))

    def late(self) -> tuple[int, int]:
        """Segments late for their listener in the last ``WINDOW`` seconds, and all of them."""
        since = self.clock() - WINDOW
        with self._lock:
            recent = [late for at, late in self._segments if at >= since]
        return sum(recent), len(recent)

    def late_ratio(self) -> float:
        late, segments = self.late()
        return late / segments if segments else 0.0

    def overloaded(self, queue_wait: float) -> bool:
        """Past what the worker can keep smooth: its lanes are nearly always busy while
        segments wait ``queue_wait`` for them, or listeners ran dry waiting for it."""
        late, segments = self.late()
        busy = self.busy_ratio() >= OVERLOAD_BUSY and queue_wait >= OVERLOAD_WAIT
        return busy or (late >= _MIN_LATE and late >= OVERLOAD_LATE * segments)


def _trim(window: deque[tuple[float, Any]], now: float) -> None:
    while window and window[0][0] < now - WINDOW:
        window.popleft()
