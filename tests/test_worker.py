"""The compute worker's scheduling, on a fake engine with known costs: one step per word.

The engine computes nothing; it records the order in which words were computed, and a word
can hold the worker at a gate, so every order asserted here is exact. The test at the end
runs the real Piper engine on two lanes, for what only it has: espeak-ng's shared state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

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
    Work,
    synthesis,
)

CHUNK = 100  # samples per word
WAIT = 10.0  # seconds before a test that waits on the worker gives up


@dataclass
class Gate:
    """Holds the worker before computing a word, until the test lets it go."""

    reached: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)

    def __call__(self) -> None:
        self.reached.set()
        assert self.go.wait(WAIT)


class Costed:
    """A fake engine: one chunk of ``CHUNK`` samples per word, each word one step, and the
    words' starts at the end. "explode" raises; a word with a gate calls it first."""

    name = "costed"
    sample_rate = 1000

    def __init__(self, concurrent: bool = False) -> None:
        self.concurrent = concurrent
        self.computed: list[str] = []
        self.closed: list[str] = []
        """Texts whose synthesis was stopped early, and on which thread."""
        self.gates: dict[str, Callable[[], object]] = {}
        self.threads: set[str] = set()

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        words = text.split()
        try:
            for word in words:
                if word in self.gates:
                    self.gates[word]()
                if word == "explode":
                    raise RuntimeError("injected engine fault")
                self.computed.append(word)
                self.threads.add(threading.current_thread().name)
                yield np.full(CHUNK, 0.1, dtype=np.float32)
            yield WordStarts(tuple(range(0, CHUNK * len(words), CHUNK)))
        except GeneratorExit:
            self.closed.append(f"{text} on {threading.current_thread().name}")
            raise


class Recorder:
    """Makes jobs and keeps their events, by job name, in the order they came."""

    def __init__(self) -> None:
        self.events: list[tuple[str, JobEvent]] = []
        self.finished = threading.Semaphore(0)
        self._lock = threading.Lock()

    def job(
        self, name: str, run: Work, first: bool = False, deadline: float = 0.0, step: float = 0.0
    ) -> Job:
        def on_event(event: JobEvent) -> None:
            with self._lock:
                self.events.append((name, event))
            if isinstance(event, JobDone | JobFailed):
                self.finished.release()

        return Job(run, first, deadline, on_event, step)

    def speak(self, name: str, text: str, first: bool = False, deadline: float = 0.0) -> Job:
        return self.job(name, synthesis(text, SynthesisOptions()), first, deadline)

    def wait(self, jobs: int) -> None:
        for _ in range(jobs):
            assert self.finished.acquire(timeout=WAIT)

    def of(self, name: str) -> list[JobEvent]:
        return [event for n, event in self.events if n == name]

    def order(self, kind: type) -> list[str]:
        return [name for name, event in self.events if isinstance(event, kind)]


def started(engine: Engine, lanes: int = 1) -> ComputeWorker:
    worker = ComputeWorker(lambda: engine, lanes)
    worker.start()
    return worker


@pytest.fixture
def engine() -> Costed:
    return Costed()


@pytest.fixture
def worker(engine: Costed) -> Iterator[ComputeWorker]:
    w = started(engine)
    yield w
    w.stop()


def test_the_engine_is_built_on_the_worker_thread() -> None:
    built_on: list[str] = []

    def build() -> Engine:
        built_on.append(threading.current_thread().name)
        return Costed()

    worker = ComputeWorker(build)
    worker.start()
    worker.stop()
    assert built_on == ["voicews-compute"]
    assert (worker.engine_name, worker.sample_rate, worker.stats.lanes) == ("costed", 1000, 1)


def test_a_job_reports_its_audio_then_its_words_then_done(
    worker: ComputeWorker, engine: Costed
) -> None:
    rec = Recorder()
    worker.submit(rec.speak("s", "one two three"))
    rec.wait(1)
    events = rec.of("s")
    assert [type(e) for e in events] == [JobAudio] * 3 + [JobWords, JobDone]
    assert all(isinstance(e, JobAudio) and e.audio.size == CHUNK for e in events[:3])
    assert events[3] == JobWords(WordStarts((0, 100, 200)))
    assert engine.threads == {"voicews-compute"}
    assert (worker.stats.jobs_done, worker.stats.jobs_failed, worker.queued) == (1, 0, 0)


def test_first_segments_go_first_then_the_earliest_deadline(
    worker: ComputeWorker, engine: Costed
) -> None:
    engine.gates["hold"] = gate = Gate()
    rec = Recorder()
    worker.submit(rec.speak("blocker", "hold"))
    assert gate.reached.wait(WAIT)  # the worker is busy: the rest queue up together
    worker.submit(rec.speak("late", "late1 late2", deadline=20.0))
    worker.submit(rec.speak("early", "early1 early2", deadline=10.0))
    worker.submit(rec.speak("first", "first1 first2", first=True, deadline=30.0))
    worker.submit(rec.speak("first-again", "again", first=True, deadline=5.0))
    assert worker.queued == 4
    gate.go.set()
    rec.wait(5)
    # The blocker finishes; the first segments (by deadline), then the rest by deadline.
    assert engine.computed == [
        "hold",
        "again",
        "first1",
        "first2",
        "early1",
        "early2",
        "late1",
        "late2",
    ]


def test_a_first_segment_overtakes_a_running_job_at_its_next_step(
    worker: ComputeWorker, engine: Costed
) -> None:
    engine.gates["c"] = gate = Gate()
    rec = Recorder()
    worker.submit(rec.speak("long", "a b c d e"))
    assert gate.reached.wait(WAIT)  # the long job is computing "c"
    worker.submit(rec.speak("first", "x y", first=True))
    gate.go.set()
    rec.wait(2)
    assert engine.computed == ["a", "b", "c", "x", "y", "d", "e"]
    assert rec.order(JobDone) == ["first", "long"]


def test_a_cancelled_job_stops_at_its_next_step_and_its_generator_is_closed_there(
    worker: ComputeWorker, engine: Costed
) -> None:
    rec = Recorder()
    job = rec.speak("long", "a b c d")
    record = job.on_event

    def cancel_after_the_first_chunk(event: JobEvent) -> None:
        record(event)
        ComputeWorker.cancel(job)

    job.on_event = cancel_after_the_first_chunk
    worker.submit(job)
    worker.submit(rec.speak("probe", "p", deadline=1.0))  # after the long job's next turn
    rec.wait(1)
    assert rec.order(JobDone) == ["probe"]
    assert [type(e) for e in rec.of("long")] == [JobAudio]
    assert engine.computed == ["a", "p"]
    assert engine.closed == ["a b c d on voicews-compute"]


def test_a_job_cancelled_while_queued_never_runs(worker: ComputeWorker, engine: Costed) -> None:
    engine.gates["hold"] = gate = Gate()
    rec = Recorder()
    worker.submit(rec.speak("blocker", "hold"))
    assert gate.reached.wait(WAIT)
    queued = rec.speak("queued", "never")
    worker.submit(queued)
    ComputeWorker.cancel(queued)
    worker.submit(rec.speak("probe", "p", deadline=1.0))
    gate.go.set()
    rec.wait(2)
    assert engine.computed == ["hold", "p"] and rec.of("queued") == []


def test_a_failure_is_reported_and_the_worker_goes_on(
    worker: ComputeWorker, engine: Costed
) -> None:
    rec = Recorder()
    worker.submit(rec.speak("bad", "fine explode", first=True))
    worker.submit(rec.speak("good", "fine", first=True))
    rec.wait(2)
    bad = rec.of("bad")
    assert [type(e) for e in bad] == [JobAudio, JobFailed]
    assert bad[1] == JobFailed("RuntimeError: injected engine fault")
    assert rec.order(JobDone) == ["good"]
    assert (worker.stats.jobs_done, worker.stats.jobs_failed) == (1, 1)


def test_work_that_yields_something_unknown_fails_instead_of_passing_it_on(
    worker: ComputeWorker,
) -> None:
    rec = Recorder()

    def odd(_engine: Engine) -> Iterator[str]:
        yield 42  # type: ignore[misc]

    worker.submit(rec.job("odd", odd))
    rec.wait(1)
    (failed,) = rec.of("odd")
    assert isinstance(failed, JobFailed) and "42" in failed.message


def test_an_engine_that_fails_to_load_is_reported() -> None:
    def build() -> Engine:
        raise FileNotFoundError("no voice here")

    worker = ComputeWorker(build)
    with pytest.raises(RuntimeError, match="engine failed to load: no voice here"):
        worker.start()


def test_a_generation_steps_aside_once_its_deadline_passes_a_segments(
    worker: ComputeWorker, engine: Costed
) -> None:
    """Each step of a long generation (agent mode) pushes its deadline back by its step."""
    rec = Recorder()
    gate = Gate()

    def tokens(_engine: Engine) -> Iterator[str]:
        gate()
        for i in range(8):
            yield f" w{i}"

    worker.submit(rec.job("generation", tokens, deadline=0.0, step=0.25))
    assert gate.reached.wait(WAIT)
    worker.submit(rec.speak("segment", "s1 s2", deadline=0.9))
    gate.go.set()
    rec.wait(2)
    order = [
        event.text if isinstance(event, JobText) else name
        for name, event in rec.events
        if isinstance(event, JobText | JobAudio)
    ]
    # The generation's deadlines 0, 0.25, 0.5 and 0.75 come before the segment's 0.9; its 1.0
    # after, and the segment keeps its deadline from step to step.
    assert order == [" w0", " w1", " w2", " w3", "segment", "segment", " w4", " w5", " w6", " w7"]
    assert rec.order(JobDone) == ["segment", "generation"]


def test_two_lanes_run_two_jobs_at_once_from_the_one_queue() -> None:
    engine = Costed(concurrent=True)
    engine.gates["meet"] = threading.Barrier(2, timeout=WAIT).wait  # each job waits for the other
    worker = started(engine, lanes=2)
    try:
        assert worker.stats.lanes == 2
        rec = Recorder()
        worker.submit(rec.speak("one", "meet a"))
        worker.submit(rec.speak("two", "meet b"))
        rec.wait(2)
    finally:
        worker.stop()
    assert sorted(rec.order(JobDone)) == ["one", "two"]
    assert engine.threads == {"voicews-compute", "voicews-compute-1"}


def test_an_engine_that_cannot_run_concurrently_gets_one_lane() -> None:
    worker = started(Costed(concurrent=False), lanes=4)
    worker.stop()
    assert worker.stats.lanes == 1
    with pytest.raises(ValueError, match="at least 1"):
        ComputeWorker(Costed, lanes=0)


# --- the real engine on two lanes --------------------------------------------------------------


def test_two_piper_lanes_keep_each_jobs_words_its_own() -> None:
    """espeak-ng keeps global state and is shared by the lanes: it is locked, so every job's
    words are its own text's, placed in order, while the inferences run side by side."""
    worker = ComputeWorker(engine_factory("piper", lanes=2), lanes=2)
    worker.start()
    try:
        assert worker.stats.lanes == 2
        rec = Recorder()
        texts = {f"s{i}": f"Session {i} says sentence number {i}, clearly." for i in range(12)}
        for name, text in texts.items():
            worker.submit(rec.speak(name, text))
        rec.wait(len(texts))
    finally:
        worker.stop()
    assert sorted(rec.order(JobDone)) == sorted(texts)
    for name, text in texts.items():
        (placed,) = [e.starts for e in rec.of(name) if isinstance(e, JobWords)]
        assert len(placed.samples) == len(text.split())
        assert list(placed.samples) == sorted(placed.samples)
