"""The compute worker: it owns the engine and runs every session's compute on its thread.

Jobs are scheduled by urgency, one step at a time: a turn's first segment goes before any
later work, and the rest goes in order of playback deadline (the session whose listener runs
dry first). A running job is resumed step by step from its generator, so a first segment
arriving mid-job overtakes it at the next step. A session has at most one synthesis job
queued (and in agent mode one generation besides), so the queue is bounded by the number of
sessions. An engine that can run on several threads at once (onnxruntime on a CPU) is served
by several lanes taking from the same queue: on a CPU, two single-threaded inferences side by
side do more than one on two threads.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import assert_never

import numpy as np

from .audio import Audio
from .engines.base import Engine, SynthesisOptions, WordStarts

log = logging.getLogger(__name__)
_BUSY_WINDOW = 10.0


@dataclass(frozen=True, slots=True)
class JobAudio:
    audio: Audio


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


def synthesis(text: str, options: SynthesisOptions) -> Work:
    """The work of speaking ``text``."""
    return lambda engine: engine.synthesize(text, options)


@dataclass(eq=False)
class Job:
    """One piece of work for the compute thread; ``on_event`` is called on that thread."""

    run: Work
    first: bool
    """A turn's first segment: it goes before everything else."""
    deadline: float
    """When the listener runs dry; earlier goes first."""
    on_event: Callable[[JobEvent], None]
    deadline_step: float = 0.0
    """Added to ``deadline`` after each step: a long generation yields to segments whose
    listeners run dry sooner, instead of holding its place."""
    cancelled: bool = False
    _steps: Iterator[Audio | WordStarts | str] | None = field(default=None, repr=False)


@dataclass(slots=True)
class WorkerStats:
    jobs_done: int = 0
    jobs_failed: int = 0
    busy_seconds: float = 0.0
    lanes: int = 1
    _steps: deque[tuple[float, float]] = field(default_factory=deque, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, end: float, seconds: float) -> None:
        """One engine step (on a lane's thread)."""
        with self._lock:
            self.busy_seconds += seconds
            self._steps.append((end, seconds))
            while self._steps and self._steps[0][0] < end - _BUSY_WINDOW:
                self._steps.popleft()

    def count(self, failed: bool) -> None:
        with self._lock:
            if failed:
                self.jobs_failed += 1
            else:
                self.jobs_done += 1

    def busy_ratio(self) -> float:
        """Share of the lanes' time in the last ``_BUSY_WINDOW`` seconds spent computing."""
        since = time.perf_counter() - _BUSY_WINDOW
        with self._lock:
            busy = sum(seconds for end, seconds in self._steps if end >= since)
        return min(1.0, busy / (_BUSY_WINDOW * self.lanes))


class ComputeWorker:
    """Start it once; ``submit`` and ``cancel`` are safe from any thread.

    ``lanes`` threads take jobs from the one queue, in the same order, where the engine can
    run on several threads at once (``Engine.concurrent``); otherwise there is one.
    """

    def __init__(self, engine_factory: Callable[[], Engine], lanes: int = 1) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, not {lanes}")
        self._factory = engine_factory
        self._lanes = lanes
        self._heap: list[tuple[int, float, int, Job]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, name="voicews-compute", daemon=True)]
        self.engine_name = ""
        self.sample_rate = 0
        self.stats = WorkerStats()

    def start(self) -> None:
        """Start the first lane, wait until it has built the engine, then the others."""
        self._threads[0].start()
        self._ready.wait()
        if self._load_error is not None:
            raise RuntimeError(f"engine failed to load: {self._load_error}") from self._load_error

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()

    def submit(self, job: Job) -> None:
        with self._cond:
            self._push(job)
            self._cond.notify()

    @staticmethod
    def cancel(job: Job) -> None:
        """Stop a job: it is skipped if queued, and stopped at its next chunk if running."""
        job.cancelled = True

    @property
    def queued(self) -> int:
        return len(self._heap)

    def _push(self, job: Job) -> None:
        heapq.heappush(self._heap, (0 if job.first else 1, job.deadline, next(self._seq), job))

    def _run(self) -> None:
        try:
            engine = self._factory()
            self.engine_name, self.sample_rate = engine.name, engine.sample_rate
        except BaseException as exc:
            self._load_error = exc
            self._ready.set()
            return
        self.stats.lanes = self._lanes if engine.concurrent else 1
        for lane in range(1, self.stats.lanes):
            thread = threading.Thread(
                target=self._serve, args=(engine,), name=f"voicews-compute-{lane}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._ready.set()
        self._serve(engine)

    def _serve(self, engine: Engine) -> None:
        while True:
            with self._cond:
                while not self._heap and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job = heapq.heappop(self._heap)[3]
            if job.cancelled:
                _close(job)
                continue
            started = time.perf_counter()
            if self._step(engine, job):
                job.deadline += job.deadline_step
                with self._cond:
                    self._push(job)
            ended = time.perf_counter()
            self.stats.record(ended, ended - started)

    def _step(self, engine: Engine, job: Job) -> bool:
        """Run one step of ``job``; True if it has more to do."""
        try:
            if job._steps is None:
                job._steps = job.run(engine)
            item = next(job._steps, None)
            event = None if item is None else _event(item)
        except Exception as exc:
            log.exception("compute job failed")
            self.stats.count(failed=True)
            job.on_event(JobFailed(f"{type(exc).__name__}: {exc}"))
            return False
        if job.cancelled:
            _close(job)
            return False
        if event is None:
            self.stats.count(failed=False)
            job.on_event(JobDone())
            return False
        job.on_event(event)
        return True


def _event(item: Audio | WordStarts | str) -> JobEvent:
    match item:
        case str():
            return JobText(item)
        case WordStarts():
            return JobWords(item)
        case np.ndarray():
            return JobAudio(item)
        case _:
            assert_never(item)


def _close(job: Job) -> None:
    """Close a cancelled job's generator here, on the thread that owns the engine."""
    if isinstance(job._steps, Generator):
        job._steps.close()
