"""The compute worker: it owns the engine and runs every session's compute on its threads.

Which job runs next is the planner's (``planning.py``); this is the execution: the lanes that
take jobs from the one queue and run them one step at a time, and the engine they share. An
engine that can run several inferences at once (onnxruntime on a CPU) is served by several
lanes: on a CPU, small inferences side by side do more than one spread over all the cores.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .. import heap
from ..core.cost import DEFAULT_PRIOR, PRIORS, Cost, CostModel
from ..core.pacing import Load
from ..engines.base import (
    Begin,
    Engine,
    SoundingEngine,
    SynthesisOptions,
    WarmingEngine,
    Window,
    WindowedEngine,
)
from .jobs import (
    Job,
    JobAudio,
    JobDone,
    JobEvent,
    JobFailed,
    JobText,
    JobWords,
    Synthesis,
    close,
    event_of,
)
from .phrases import PhraseCache, copied
from .planning import Planner
from .stats import WorkerFigures, WorkerStats

log = logging.getLogger(__name__)


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
        phrase_seconds: float = 0.0,
    ) -> None:
        """``phrase_seconds``: the audio of turns' first segments kept to give again
        (``phrases``)."""
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, not {lanes}")
        self._factory = engine_factory
        self._lanes = lanes
        self._plan = Planner()
        self._cond = threading.Condition()
        self._stopping = False
        self._ready = threading.Event()
        self.warmed = threading.Event()
        """Set once the engine is built and warmed (``WarmingEngine``): until then jobs wait,
        and ``/readyz`` says ``warming``."""
        self.warm_seconds = 0.0
        self._load_error: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, name="voicews-compute", daemon=True)]
        self.engine_name = ""
        self.sample_rate = 0
        self.device = ""
        self._clock = clock
        self.stats = WorkerStats(clock=clock)
        self._phrase_seconds = phrase_seconds
        self.phrases = PhraseCache(0)
        self._sounding: Callable[[SynthesisOptions], SynthesisOptions] = lambda options: options
        self._worked = False
        """Some work was done since the heap was last trimmed (``heap.trim``)."""

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
        """Queue ``job``; a turn's first segment said before gets what it gave then, at once."""
        if job.first and isinstance(job.run, Synthesis) and self.phrases.max_samples:
            job._phrase = self.phrases.key(job.run.text, self._sounding(job.run.options))
            events = None if job._phrase is None else self.phrases.get(job._phrase)
            if events is not None:
                for event in events:
                    job.on_event(event)
                job.on_event(JobDone())
                return
        with self._cond:
            self._plan.add(job, self._clock())
            self._cond.notify_all()  # a pinned job waits for its own lane

    def cancel(self, job: Job) -> None:
        """Stop a job: it is skipped if queued, and stopped at its next chunk if running."""
        with self._cond:
            job.cancelled = True
            self._plan.changed()
            self._cond.notify_all()

    def changed_since(self, version: int, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the queue, its jobs or the lanes to change from
        ``version`` (-1: none yet); the version now (what publishes the load to front
        processes waits on)."""
        with self._cond:
            self._cond.wait_for(lambda: self._plan.version != version or self._stopping, timeout)
            return self._plan.version

    def figures(self) -> WorkerFigures:
        stats = self.stats
        return WorkerFigures(
            queued=self.queued,
            warming=not self.warmed.is_set(),
            warm_seconds=self.warm_seconds,
            overloaded=self.overloaded,
            busy_ratio=stats.busy_ratio(),
            late_ratio=stats.late_ratio(),
            batches=stats.batches,
            batched_windows=stats.batched_windows,
            largest_batch=stats.largest_batch,
            begun_batches=stats.begun_batches,
            begun_sentences=stats.begun_sentences,
            phrase_hits=self.phrases.hits,
            phrases_kept=len(self.phrases),
        )

    @property
    def queued(self) -> int:
        with self._cond:
            return self._plan.queued

    def load(self) -> Load:
        """What sessions pace themselves by, read at one instant (a session syncs after every
        event and frame: one lock, not one per figure)."""
        with self._cond:
            return self._plan.load(self._clock())

    @property
    def queue_wait(self) -> float:
        """Seconds a segment waits in the queue before it starts, lately: at once the longest
        wait seen, easing off as the waits shorten and as time passes without one."""
        with self._cond:
            return self._plan.waited(self._clock())

    @property
    def overloaded(self) -> bool:
        """Past what it can keep smooth (``WorkerStats.overloaded``)."""
        return self.stats.overloaded(self.queue_wait)

    @property
    def cost(self) -> Cost:
        """A segment's compute to its first audio, as fitted (the engine's prior at first)."""
        with self._cond:
            return self._plan.costs.estimate(self._clock())

    @property
    def cost_per_audio_second(self) -> float:
        """Lane-seconds of compute per second of audio, as measured (an estimate at first)."""
        return self._plan.cost_per_audio_second

    def _run(self) -> None:
        try:
            engine = self._factory()
            self.engine_name, self.sample_rate = engine.name, engine.sample_rate
            self.phrases = PhraseCache(round(self._phrase_seconds * engine.sample_rate))
            if isinstance(engine, SoundingEngine):
                self._sounding = engine.sounding
            self.device = engine.device
            lanes = self._lanes if engine.concurrent else 1
            with self._cond:
                self._plan.lanes = lanes
                self._plan.costs = CostModel(PRIORS.get(engine.name, DEFAULT_PRIOR))
                self._plan.changed()
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
        self._warm(engine)
        if isinstance(engine, WindowedEngine) and engine.batched:
            from .batch_lane import BatchLane

            BatchLane(self, engine).serve()
        else:
            self._serve(engine)

    def _warm(self, engine: Engine) -> None:
        """Warm the engine on its thread before serving: no caller pays its cold start. A
        failure is logged and serving goes on, cold."""
        try:
            if isinstance(engine, WarmingEngine):
                self.warm_seconds = engine.warm()
        except Exception:
            log.exception("warming the engine failed")
        finally:
            self.warmed.set()

    def _take(self) -> tuple[Job | None, list[Job]]:
        """With the lock held: the job due first that may start now, or None and the
        cancelled jobs to close; None and nothing when the worker has just fallen idle, for
        this lane to trim the heap; when stopping, None and every job this lane may close (a
        generation's generator dropped with the worker would be finalized on another thread,
        where MLX's stream context fails)."""
        lane = threading.get_ident()
        while not self._stopping:
            job, dropped = self._plan.take(lane, self._clock())
            if job is not None or dropped:
                return job, dropped
            if self._worked and not self._plan.running and not self._plan.queued:
                self._worked = False
                return None, []
            self._cond.wait()
        return None, self._plan.drain(lane)

    def _serve(self, engine: Engine) -> None:
        while True:
            with self._cond:
                job, dropped = self._take()
            for cancelled in dropped:
                close(cancelled)
            if job is None:
                if self._stopping:
                    return
                if not dropped:
                    heap.trim()  # outside the lock: a submit never waits for it
                continue
            started = self._clock()
            more, audio_seconds = self._step(engine, job)
            ended = self._clock()
            self.stats.record(ended, ended - started)
            job._computed += ended - started
            self._stepped(job, started, ended, ended - started, more, audio_seconds)

    def _stepped(
        self,
        job: Job,
        started: float,
        ended: float,
        lane_seconds: float,
        more: bool,
        audio_seconds: float,
    ) -> None:
        """A step of ``job`` that began at ``started`` gave ``audio_seconds`` at ``ended`` and
        cost ``lane_seconds`` (its share of a batched step): tell the planner."""
        first_audio = bool(audio_seconds) and not job._sounded
        if first_audio:
            job._sounded = True
            if not job.first:
                in_time = job._submitted + (ended - started) <= job.deadline
                self.stats.sounded(ended, late=in_time and ended > job.deadline)
        with self._cond:
            self._plan.stepped(job, ended, lane_seconds, audio_seconds, first_audio, more)
            self._worked = True
            self._cond.notify_all()  # a lane that waited for this one, or for the job

    def _step(self, engine: Engine, job: Job) -> tuple[bool, float]:
        """Run one step of ``job``: whether it has more to do, and the seconds of audio the
        step gave. A step ends at a chunk of audio, except that a synthesis that has placed
        its words runs on to its end (an engine places them just before its last chunk, so
        what follows costs nothing): its session may ask for its next segment at once,
        rather than when the step after its last audio came round, behind every segment due
        sooner (a burst of 16: 340 ms later, median, and all the sessions that waited asked
        at once)."""
        given, worded = 0.0, False
        while True:
            try:
                if job._steps is None:
                    job._steps = job.run(engine)
                item = next(job._steps, None)
                if isinstance(item, Window | Begin):
                    raise TypeError("a window from an engine the worker does not batch")
                event = None if item is None else event_of(item)
            except Exception as exc:
                more, _ = self._failed(job, exc)
                return more, given
            more, seconds = self._deliver(job, event)
            given += seconds
            worded = worded or isinstance(event, JobWords)
            if not more or isinstance(event, JobText) or (seconds and not worded):
                return more, given

    def _failed(self, job: Job, exc: Exception) -> tuple[bool, float]:
        log.exception("compute job failed", exc_info=exc)
        self.stats.count(failed=True)
        job.on_event(JobFailed(f"{type(exc).__name__}: {exc}"))
        return False, 0.0

    def _deliver(self, job: Job, event: JobEvent | None) -> tuple[bool, float]:
        """Hand ``job``'s session what its step gave (None: the work is done): whether it has
        more to do, and the seconds of audio given."""
        if job.cancelled:
            close(job)
            return False, 0.0
        if event is None:
            self.stats.count(failed=False)
            if job._phrase is not None:
                self.phrases.put(job._phrase, job._gave)
            job.on_event(JobDone())
            return False, 0.0
        if job._phrase is not None:
            job._gave.append(copied(event))
        job.on_event(event)
        if isinstance(event, JobAudio):
            return True, event.audio.size / self.sample_rate
        return True, 0.0
