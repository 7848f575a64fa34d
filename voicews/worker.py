"""The compute worker: it owns the engine and runs every session's compute on its threads.

It plans rather than ranks: every queued job is due at a time (when its listener runs dry;
for a turn's first segment, ``FIRST_AUDIO_TARGET`` after it was asked for) and the job due
first runs next, one step at a time. So a listener about to run dry goes before a first audio
that can wait a little, and a first audio before a listener with seconds in hand; a running
job is resumed step by step from its generator, and a job due sooner overtakes it at its next
step.

Fairness holds per account (a session, or all one-shot requests together), not per job: each
step's compute is charged to its account, in the seconds of audio it is worth, against a
real-time clock. An account given more than ``ALLOWANCE`` beyond what a real-time listener
could have heard (a session that starts turns faster than it listens, a one-shot request that
wants all its audio at once) waits as if its listener had that much in hand, and its jobs
never take the last free lane; a session that listens never gets there. A session has at most
one synthesis job queued (and in agent mode one generation besides), so the queue is bounded
by the number of sessions.

An engine that can run several inferences at once (onnxruntime on a CPU) is served by several
lanes taking from the one queue: on a CPU, small inferences side by side do more than one
spread over all the cores.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, assert_never

import numpy as np

from .audio import Audio
from .cost import DEFAULT_PRIOR, PRIORS, Cost, CostModel
from .engines.base import Engine, SynthesisOptions, WordStarts

log = logging.getLogger(__name__)

FIRST_AUDIO_TARGET = 0.2
"""Seconds after a turn's first segment is asked for that it is due: a listener who will run
dry sooner goes first."""
ALLOWANCE = 5.0
"""Seconds of audio an account may be given beyond what a real-time listener could have heard
before its jobs wait (about a long sentence, so a barge-in now and then costs nothing)."""
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
WAIT_HALF_LIFE = 1.0
"""Seconds in which the queue wait last seen counts half as much: a wait seen in a burst says
less and less of a worker that has not made anyone wait since."""
_INITIAL_COST = 0.1  # lane-seconds of compute per second of audio, until measured


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
class Account:
    """Whose compute a job is: one session, or all one-shot requests together."""

    clock: float = -math.inf
    """When a real-time listener would have heard all the audio the account's compute was
    worth (``time.monotonic``)."""

    def charge(self, ended: float, worth: float) -> None:
        """A step that ended at ``ended`` took compute worth ``worth`` seconds of audio."""
        self.clock = max(self.clock, ended) + worth


@dataclass(eq=False)
class Job:
    """One piece of work for the compute thread; ``on_event`` is called on that thread."""

    run: Work
    deadline: float
    """When the listener runs dry (``time.monotonic``, the event loop's clock); for a first
    segment, when it was asked for. Each step's audio moves it on as the listener's end."""
    on_event: Callable[[JobEvent], None]
    first: bool = False
    """A turn's first segment: due ``FIRST_AUDIO_TARGET`` after its deadline."""
    account: Account | None = None
    """Whose compute it is; None: nobody's, never held back."""
    deadline_step: float = 0.0
    """Added to ``deadline`` after each step: a long generation yields to segments whose
    listeners run dry sooner, instead of holding its place."""
    chars: int = 0
    """A segment's spoken length (``segmenter.spoken_length``): the compute to its first audio
    teaches the engine's cost model (0: not a segment)."""
    pinned: bool = False
    """Every step, and the close, on the lane that ran its first: its generator holds state
    bound to that thread (mlx-lm's stream context, which fails when closed on another)."""
    cancelled: bool = False
    _lane: int | None = field(default=None, repr=False)  # the thread it is pinned to
    _steps: Iterator[Audio | WordStarts | str] | None = field(default=None, repr=False)
    _submitted: float = field(default=0.0, repr=False)
    _sounded: bool = field(default=False, repr=False)
    _computed: float = field(default=0.0, repr=False)  # lane-seconds of its steps so far

    def due(self) -> float:
        """When it should give its first output; the job due first runs next."""
        due = self.deadline + (FIRST_AUDIO_TARGET if self.first else 0.0)
        if self.account is not None:
            due = max(due, self.account.clock - ALLOWANCE)
        return due

    def gave(self, ended: float, audio_seconds: float) -> None:
        """A step gave ``audio_seconds`` of audio at ``ended``: the listener has that much more
        to hear before the next step is needed."""
        plays_from = ended if self.first else max(self.deadline, ended)
        self.deadline, self.first = plays_from + audio_seconds, False


@dataclass(frozen=True, slots=True)
class Load:
    """The worker as a session paces itself by it (``ComputeWorker.load``)."""

    wait: float
    """Seconds segments wait in the queue lately (``ComputeWorker.queue_wait``)."""
    cost: Cost
    """A segment's compute to its first audio, as fitted."""
    idle: bool
    """A job submitted now would start at once."""
    backlog: float
    """Seconds a first segment asked for now would wait: the compute of the queued segments
    due before it, over the lanes."""


@dataclass(slots=True)
class WorkerStats:
    """What the lanes did over the last ``WINDOW`` seconds, for metrics and readiness."""

    jobs_done: int = 0
    jobs_failed: int = 0
    busy_seconds: float = 0.0
    lanes: int = 1
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


class ComputeWorker:
    """Start it once; ``submit`` and ``cancel`` are safe from any thread.

    ``lanes`` threads take jobs from the one queue where the engine can run on several threads
    at once (``Engine.concurrent``); otherwise there is one. ``clock`` is the deadlines' clock,
    the event loop's (tests drive a fake one).
    """

    def __init__(
        self,
        engine_factory: Callable[[], Engine],
        lanes: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, not {lanes}")
        self._factory = engine_factory
        self._lanes = lanes
        self._queue: list[Job] = []
        self._running = 0
        self._cost = _INITIAL_COST
        self._costs = CostModel(DEFAULT_PRIOR)
        self._wait = 0.0
        self._wait_at = 0.0
        self._cond = threading.Condition()
        self._stopping = False
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, name="voicews-compute", daemon=True)]
        self.engine_name = ""
        self.sample_rate = 0
        self._clock = clock
        self.stats = WorkerStats(clock=clock)

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
            job._submitted = self._clock()
            self._queue.append(job)
            self._cond.notify_all()  # a pinned job waits for its own lane

    @staticmethod
    def cancel(job: Job) -> None:
        """Stop a job: it is skipped if queued, and stopped at its next chunk if running."""
        job.cancelled = True

    @property
    def queued(self) -> int:
        with self._cond:
            return sum(not job.cancelled for job in self._queue)

    def load(self) -> Load:
        """What sessions pace themselves by, read at one instant (a session syncs after every
        event and frame: one lock, not one per figure)."""
        with self._cond:
            now = self._clock()
            cost = self._costs.estimate(now)
            return Load(self._waited(now), cost, self._idle(), self._backlog(now, cost))

    def _backlog(self, now: float, cost: Cost) -> float:
        """Seconds a first segment asked for now would wait: the compute of the queued
        segments due before it, as the cost model puts it, over the lanes."""
        due = now + FIRST_AUDIO_TARGET
        ahead = [j for j in self._queue if j.chars and not j.cancelled and j.due() <= due]
        return sum(cost.latency(j.chars) for j in ahead) / self.stats.lanes

    def _idle(self) -> bool:
        """A job submitted now would start at once: a lane is free and nothing waits."""
        waiting = any(not job.cancelled for job in self._queue)
        return not waiting and self._running < self.stats.lanes

    @property
    def queue_wait(self) -> float:
        """Seconds a segment waits in the queue before it starts, lately: at once the longest
        wait seen, easing off as the waits shorten and as time passes without one."""
        with self._cond:
            return self._waited(self._clock())

    def _waited(self, now: float) -> float:
        return self._wait * math.pow(0.5, (now - self._wait_at) / WAIT_HALF_LIFE)

    @property
    def overloaded(self) -> bool:
        """Past what it can keep smooth (``WorkerStats.overloaded``)."""
        return self.stats.overloaded(self.queue_wait)

    @property
    def cost(self) -> Cost:
        """A segment's compute to its first audio, as fitted (the engine's prior at first)."""
        with self._cond:
            return self._costs.estimate(self._clock())

    @property
    def cost_per_audio_second(self) -> float:
        """Lane-seconds of compute per second of audio, as measured (an estimate at first)."""
        return self._cost

    def _run(self) -> None:
        try:
            engine = self._factory()
            self.engine_name, self.sample_rate = engine.name, engine.sample_rate
            self._costs = CostModel(PRIORS.get(engine.name, DEFAULT_PRIOR))
            lanes = self._lanes if engine.concurrent else 1
        except BaseException as exc:
            self._load_error = exc
            self._ready.set()
            return
        self.stats.lanes = lanes
        for lane in range(1, lanes):
            thread = threading.Thread(
                target=self._serve, args=(engine,), name=f"voicews-compute-{lane}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._ready.set()
        self._serve(engine)

    def _take(self) -> tuple[Job | None, list[Job]]:
        """With the lock held: the job due first that may start now, or None and the
        cancelled jobs to close (none when stopping)."""
        lane = threading.get_ident()
        while not self._stopping:
            dropped = [job for job in self._queue if job.cancelled and job._lane in (None, lane)]
            if dropped:
                self._queue = [job for job in self._queue if job not in dropped]
                return None, dropped
            now = self._clock()
            startable = (
                job
                for job in self._queue
                if job._lane in (None, lane) and self._may_start(job, now)
            )
            job = min(startable, key=Job.due, default=None)  # ties: the one queued first
            if job is not None:
                self._queue.remove(job)
                self._running += 1
                if job.pinned:
                    job._lane = lane
                if job._steps is None and not job.first:  # it starts now, after its wait
                    wait, lately = now - job._submitted, self._waited(now)
                    self._wait = wait if wait > lately else 0.9 * lately + 0.1 * wait
                    self._wait_at = now
                return job, []
            self._cond.wait()
        return None, []

    def _may_start(self, job: Job, now: float) -> bool:
        """A job held back by its account (given more than the allowance beyond real time)
        may not take the last free lane: it stays for those whose listeners need it."""
        lanes = self.stats.lanes
        if lanes == 1 or self._running < lanes - 1 or job.account is None:
            return True
        return job.account.clock - ALLOWANCE <= now

    def _serve(self, engine: Engine) -> None:
        while True:
            with self._cond:
                job, dropped = self._take()
            for cancelled in dropped:
                _close(cancelled)
            if job is None:
                if self._stopping:
                    return
                continue
            started = self._clock()
            sounded = job._sounded
            more, audio_seconds = self._step(engine, job)
            ended = self._clock()
            lane_seconds = ended - started
            self.stats.record(ended, lane_seconds)
            if audio_seconds and not sounded and not job.first:
                in_time = job._submitted + (ended - started) <= job.deadline
                self.stats.sounded(ended, late=in_time and ended > job.deadline)
            job._computed += lane_seconds
            with self._cond:
                self._running -= 1
                if audio_seconds and not sounded and job.chars:
                    self._costs.observe(job.chars, job._computed, ended)
                if audio_seconds:
                    self._cost = 0.9 * self._cost + 0.1 * lane_seconds / audio_seconds
                    job.gave(ended, audio_seconds)
                if job.account is not None:
                    job.account.charge(ended, lane_seconds / self._cost)
                if more:
                    job.deadline += job.deadline_step
                    self._queue.append(job)
                self._cond.notify_all()  # a lane that waited for this one, or for the job

    def _step(self, engine: Engine, job: Job) -> tuple[bool, float]:
        """Run one step of ``job``: whether it has more to do, and the seconds of audio the
        step gave."""
        try:
            if job._steps is None:
                job._steps = job.run(engine)
            item = next(job._steps, None)
            event = None if item is None else _event(item)
        except Exception as exc:
            log.exception("compute job failed")
            self.stats.count(failed=True)
            job.on_event(JobFailed(f"{type(exc).__name__}: {exc}"))
            return False, 0.0
        if job.cancelled:
            _close(job)
            return False, 0.0
        if event is None:
            self.stats.count(failed=False)
            job.on_event(JobDone())
            return False, 0.0
        job.on_event(event)
        if isinstance(event, JobAudio):
            job._sounded = True
            return True, event.audio.size / self.sample_rate
        return True, 0.0


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
