"""The compute worker with the real Piper engine: scheduling order, cancellation, failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from conftest import FailsOnMarker
from voicews.audio import Audio
from voicews.engines import engine_factory
from voicews.engines.base import Engine, SynthesisOptions, WordStarts
from voicews.worker import (
    ComputeWorker,
    Job,
    JobAudio,
    JobDone,
    JobEvent,
    JobFailed,
    JobText,
    JobWords,
)

LONG = " ".join(f"Sentence {i} of a long answer, spoken in order." for i in range(8))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, JobEvent]] = []
        self.finished = threading.Semaphore(0)
        self._lock = threading.Lock()

    def job(self, name: str, text: str, first: bool, deadline: float = 0.0) -> Job:
        def on_event(event: JobEvent) -> None:
            with self._lock:
                self.events.append((name, event))
            if isinstance(event, JobDone | JobFailed):
                self.finished.release()

        return Job(text, SynthesisOptions(), first, deadline, on_event)

    def wait(self, jobs: int) -> None:
        for _ in range(jobs):
            assert self.finished.acquire(timeout=60)

    def order(self, kind: type) -> list[str]:
        return [name for name, event in self.events if isinstance(event, kind)]


@pytest.fixture(scope="module")
def worker() -> Iterator[ComputeWorker]:
    w = ComputeWorker(engine_factory("piper"))
    w.start()
    yield w
    w.stop()


def test_engine_loads_on_the_worker_thread(worker: ComputeWorker) -> None:
    assert (worker.engine_name, worker.sample_rate) == ("piper", 22050)


def test_first_segments_overtake_later_ones(worker: ComputeWorker) -> None:
    rec = Recorder()
    gate = threading.Event()
    # Hold the worker busy so all three jobs are queued together.
    blocker = rec.job("blocker", "Wait.", first=True)
    original = blocker.on_event

    def hold(event: JobEvent) -> None:
        gate.wait(10)
        original(event)

    blocker.on_event = hold
    worker.submit(blocker)
    worker.submit(rec.job("late-deadline", "Later part.", first=False, deadline=20.0))
    worker.submit(rec.job("early-deadline", "Earlier part.", first=False, deadline=10.0))
    worker.submit(rec.job("first", "Hello.", first=True, deadline=30.0))
    gate.set()
    rec.wait(4)
    first_audio = list(dict.fromkeys(rec.order(JobAudio)))
    assert first_audio == ["blocker", "first", "early-deadline", "late-deadline"]


def test_a_long_segment_waits_its_turn_by_the_audio_it_has_produced(
    worker: ComputeWorker,
) -> None:
    """Once a segment has audio out, the rest of it is due when that audio has played: a
    later segment whose listener runs dry sooner goes between its chunks, even when the long
    one is a first segment."""
    rec = Recorder()
    started = threading.Event()
    long = rec.job("long", LONG, first=True, deadline=0.0)
    original = long.on_event

    def notify(event: JobEvent) -> None:
        original(event)
        started.set()

    long.on_event = notify
    worker.submit(long)
    assert started.wait(30)
    worker.submit(rec.job("due-soon", "Right away.", first=False, deadline=0.5))
    rec.wait(2)
    names = [name for name, event in rec.events if isinstance(event, JobAudio)]
    assert names.index("due-soon") < len(names) - 1 - names[::-1].index("long")


def test_a_first_segment_interrupts_a_long_job_between_chunks(worker: ComputeWorker) -> None:
    rec = Recorder()
    started = threading.Event()
    long = rec.job("long", LONG, first=False)
    original = long.on_event

    def notify(event: JobEvent) -> None:
        original(event)
        started.set()

    long.on_event = notify
    worker.submit(long)
    assert started.wait(30)
    worker.submit(rec.job("first", "Hi there.", first=True))
    rec.wait(2)
    names = [name for name, _ in rec.events]
    assert names.index("first") < len(names) - 1 - names[::-1].index("long")
    assert len(rec.order(JobAudio)) > 3


def test_cancelled_job_stops_at_next_chunk(worker: ComputeWorker) -> None:
    rec = Recorder()
    job = rec.job("long", LONG, first=False)
    got_audio = threading.Event()
    original = job.on_event

    def cancel_after_first(event: JobEvent) -> None:
        original(event)
        ComputeWorker.cancel(job)
        got_audio.set()

    job.on_event = cancel_after_first
    worker.submit(job)
    assert got_audio.wait(30)
    probe = rec.job("probe", "Done.", first=True)
    worker.submit(probe)
    rec.wait(1)
    assert rec.order(JobAudio).count("long") == 1
    assert "long" not in rec.order(JobDone)


def test_engine_failure_is_reported_and_the_worker_goes_on() -> None:
    build = engine_factory("piper")
    worker = ComputeWorker(lambda: FailsOnMarker(build()))
    worker.start()
    try:
        rec = Recorder()
        worker.submit(rec.job("bad", "please explode now", first=True))
        worker.submit(rec.job("good", "Fine.", first=True))
        rec.wait(2)
    finally:
        worker.stop()
    failed = [e for n, e in rec.events if n == "bad"]
    assert len(failed) == 1 and isinstance(failed[0], JobFailed)
    assert "injected engine fault" in failed[0].message
    assert rec.order(JobDone) == ["good"]
    assert worker.stats.jobs_failed == 1


def test_engine_that_fails_to_load_is_reported() -> None:
    worker = ComputeWorker(engine_factory("piper", "/nonexistent/voice.onnx"))
    with pytest.raises(RuntimeError, match="engine failed to load"):
        worker.start()


def test_generation_jobs_step_aside_for_segments_whose_deadline_comes_sooner(
    worker: ComputeWorker,
) -> None:
    """A long text generation (as in agent mode) advances its deadline each step."""
    rec = Recorder()

    def words(engine: Engine) -> Iterator[str]:
        for i in range(200):
            time.sleep(0.002)  # a token's worth of compute
            yield f" w{i}"

    generation = rec.job("generation", "", first=False, deadline=0.0)
    generation.work, generation.deadline_step = words, 0.01
    worker.submit(generation)
    while len(rec.events) < 5:
        time.sleep(0.001)
    worker.submit(rec.job("segment", "In time.", first=False, deadline=0.2))
    rec.wait(2)
    texts = [e.text for name, e in rec.events if isinstance(e, JobText)]
    assert texts[:3] == [" w0", " w1", " w2"] and len(texts) == 200
    assert rec.order(JobDone) == ["segment", "generation"]


# --- lanes: a concurrent engine served by several threads from the one queue ----------------


class _Serial:
    """The real engine, declared unable to run on two threads (as MLX is)."""

    def __init__(self, inner: Engine) -> None:
        self.inner, self.name, self.sample_rate = inner, inner.name, inner.sample_rate
        self.concurrent = False

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        return self.inner.synthesize(text, options)


def test_two_lanes_synthesize_side_by_side_and_each_job_stays_whole() -> None:
    worker = ComputeWorker(engine_factory("piper", lanes=2), lanes=2)
    worker.start()
    try:
        assert worker.stats.lanes == 2
        rec = Recorder()
        running: set[str] = set()
        overlapped = threading.Event()
        lock = threading.Lock()
        texts = {f"s{i}": f"Session {i} says sentence number {i}, clearly." for i in range(12)}

        def job(name: str, text: str) -> Job:
            inner = rec.job(name, text, first=False)
            original = inner.on_event

            def on_event(event: JobEvent) -> None:
                with lock:
                    running.add(name)
                    if len(running) > 1:
                        overlapped.set()
                original(event)
                if isinstance(event, JobDone | JobFailed):
                    with lock:
                        running.discard(name)

            inner.on_event = on_event
            return inner

        for name, text in texts.items():
            worker.submit(job(name, text))
        rec.wait(len(texts))
    finally:
        worker.stop()
    assert overlapped.is_set()  # two jobs were in flight at once
    assert sorted(rec.order(JobDone)) == sorted(texts)
    # espeak-ng is shared and locked: every job's words are its own text's, placed in order.
    for name, text in texts.items():
        (placed,) = [e.starts for n, e in rec.events if n == name and isinstance(e, JobWords)]
        assert len(placed.samples) == len(text.split())
        assert list(placed.samples) == sorted(placed.samples)


def test_an_engine_that_cannot_run_concurrently_gets_one_lane() -> None:
    build = engine_factory("piper")
    worker = ComputeWorker(lambda: _Serial(build()), lanes=4)
    worker.start()
    try:
        assert worker.stats.lanes == 1
        worker.submit(
            Job("x", SynthesisOptions(), False, 0.0, lambda e: None, work=lambda e: iter(()))
        )
    finally:
        worker.stop()


def test_work_jobs_need_one_lane() -> None:
    worker = ComputeWorker(engine_factory("piper", lanes=2), lanes=2)
    worker.start()
    try:
        with pytest.raises(ValueError, match="one lane"):
            worker.submit(
                Job("x", SynthesisOptions(), False, 0.0, lambda e: None, work=lambda e: iter(()))
            )
    finally:
        worker.stop()
    with pytest.raises(ValueError, match="at least 1"):
        ComputeWorker(engine_factory("piper"), lanes=0)
