"""The compute worker's scheduling, on a fake engine with known costs: one step per word.

The engine computes nothing; it records the order in which words were computed, and a word
can hold the worker at a gate, so every order asserted here is exact. Where time matters the
worker runs on a fake clock that only the engine moves (each word costs ``STEP`` seconds and
gives ``CHUNK`` samples, a tenth of a second of audio). The test at the end runs the real
Piper engine on two lanes, for what only it has: espeak-ng's shared state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from conftest import rss_now
from voicews import heap
from voicews.audio import Audio
from voicews.compute.execution import ComputeWorker
from voicews.compute.jobs import (
    ALLOWANCE,
    FIRST_AUDIO_TARGET,
    Account,
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
from voicews.compute.planning import LOAD_FRESH, WAIT_HALF_LIFE, Planner, next_job
from voicews.compute.stats import OVERLOAD_BUSY, OVERLOAD_WAIT, WINDOW, WorkerStats
from voicews.core.cost import DEFAULT_PRIOR, Cost
from voicews.core.pacing import Load
from voicews.engines import engine_factory
from voicews.engines.base import Engine, SynthesisOptions, WordStarts

CHUNK = 100  # samples per word: 0.1 s of audio at the fake engine's 1000 Hz
STEP = 0.01  # seconds of fake compute per word
WAIT = 10.0  # seconds before a test that waits on the worker gives up


class FakeClock:
    """The worker's clock, moved by the fake engine (``STEP`` per word) or by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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

    name, device = "costed", "none"
    sample_rate = 1000

    def __init__(self, concurrent: bool = False, clock: FakeClock | None = None) -> None:
        self.concurrent = concurrent
        self.clock = clock
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
                if self.clock is not None:
                    self.clock.now += STEP
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
        self,
        name: str,
        run: Work,
        first: bool = False,
        deadline: float = 0.0,
        step: float = 0.0,
        account: Account | None = None,
    ) -> Job:
        def on_event(event: JobEvent) -> None:
            with self._lock:
                self.events.append((name, event))
            if isinstance(event, JobDone | JobFailed):
                self.finished.release()

        return Job(run, deadline, on_event, first=first, account=account, deadline_step=step)

    def speak(
        self,
        name: str,
        text: str,
        first: bool = False,
        deadline: float = 0.0,
        account: Account | None = None,
    ) -> Job:
        return self.job(name, synthesis(text, SynthesisOptions()), first, deadline, 0.0, account)

    def wait(self, jobs: int) -> None:
        for _ in range(jobs):
            assert self.finished.acquire(timeout=WAIT)

    def of(self, name: str) -> list[JobEvent]:
        return [event for n, event in self.events if n == name]

    def order(self, kind: type) -> list[str]:
        return [name for name, event in self.events if isinstance(event, kind)]


def hold(worker: ComputeWorker, engine: Costed, rec: Recorder, deadline: float = 0.0) -> Gate:
    """A blocker job that holds the worker's one lane until the gate opens: what is submitted
    meanwhile queues up together."""
    engine.gates["hold"] = gate = Gate()
    worker.submit(rec.speak("blocker", "hold", deadline=deadline))
    assert gate.reached.wait(WAIT)
    return gate


def started(engine: Engine, lanes: int = 1, clock: FakeClock | None = None) -> ComputeWorker:
    worker = ComputeWorker(lambda: engine, lanes, clock or time.monotonic)
    worker.start()
    return worker


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(clock: FakeClock) -> Costed:
    return Costed(clock=clock)


@pytest.fixture
def worker(engine: Costed, clock: FakeClock) -> Iterator[ComputeWorker]:
    w = started(engine, clock=clock)
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


def test_a_synthesis_that_placed_its_words_ends_with_its_last_chunk(
    worker: ComputeWorker, clock: FakeClock
) -> None:
    """An engine places its words just before its last chunk: the step that gives them runs
    on to the end, so the session hears its segment is done at once and may ask for the next,
    rather than after every segment due sooner has had its turn (in a burst of 16 that was
    340 ms later, median, and the sessions kept waiting all asked at once)."""
    rec, gate = Recorder(), Gate()

    def words_first(engine: Engine) -> Iterator[Audio | WordStarts]:
        yield np.full(CHUNK, 0.1, dtype=np.float32)
        gate()  # computing the last chunk
        yield WordStarts((0, CHUNK))
        yield np.full(CHUNK, 0.1, dtype=np.float32)

    worker.submit(rec.job("segment", words_first, deadline=clock()))
    assert gate.reached.wait(WAIT)
    # Meanwhile a segment due before the listener of the first runs dry is asked for.
    worker.submit(rec.speak("sooner", "one", deadline=clock()))
    gate.go.set()
    rec.wait(2)
    assert [type(e) for e in rec.of("segment")] == [JobAudio, JobWords, JobAudio, JobDone]
    assert rec.order(JobDone) == ["segment", "sooner"]


def test_jobs_run_as_they_are_due_a_first_segment_a_little_after_it_was_asked_for(
    worker: ComputeWorker, engine: Costed, clock: FakeClock
) -> None:
    rec = Recorder()
    gate = hold(worker, engine, rec)  # the worker is busy: the rest queue up together
    now = clock()
    worker.submit(rec.speak("in-hand", "hand1 hand2", deadline=now + 1.0))  # 1 s left to hear
    worker.submit(rec.speak("first", "first1 first2", first=True, deadline=now))
    worker.submit(rec.speak("dry", "dry1", deadline=now + 0.1))  # runs dry in 0.1 s
    worker.submit(rec.speak("asked-before", "again", first=True, deadline=now - 0.15))
    assert worker.queued == 4
    gate.go.set()
    rec.wait(5)
    # Due: asked-before at now + 0.05, dry at + 0.1, first at + 0.2 (FIRST_AUDIO_TARGET), and
    # the listener with a second in hand last.
    assert FIRST_AUDIO_TARGET == 0.2
    assert engine.computed == ["hold", "again", "dry1", "first1", "first2", "hand1", "hand2"]


def test_a_first_segment_is_due_like_any_other_once_its_first_audio_is_out(
    worker: ComputeWorker, engine: Costed, clock: FakeClock
) -> None:
    """A first segment is due ``FIRST_AUDIO_TARGET`` after it was asked for only until its
    first audio is out; then, like any segment, when its listener runs dry, each chunk moving
    that back by the audio it made: one session's long first segment cannot hold back another
    listener who runs dry sooner."""
    rec = Recorder()
    gate = hold(worker, engine, rec)
    now = clock()
    worker.submit(rec.speak("long", "a b c d", first=True, deadline=now))
    worker.submit(rec.speak("soon", "s1 s2", deadline=now + 0.25))
    gate.go.set()
    rec.wait(3)
    # "long" is due at now + 0.2, before "soon"; each word (0.1 s of audio, 0.01 s of
    # compute) makes the rest due at + 0.12, 0.22, 0.32: "soon" (due at 0.25, then 0.35)
    # goes between its words.
    assert engine.computed == ["hold", "a", "b", "c", "s1", "d", "s2"]


def test_a_first_segment_overtakes_a_running_job_due_later_at_its_next_step(
    worker: ComputeWorker, engine: Costed, clock: FakeClock
) -> None:
    engine.gates["c"] = gate = Gate()
    rec = Recorder()
    worker.submit(rec.speak("long", "a b c d e", deadline=clock() + 1.0))
    assert gate.reached.wait(WAIT)  # the long job is computing "c"
    worker.submit(rec.speak("first", "x y", first=True, deadline=clock()))
    gate.go.set()
    rec.wait(2)
    assert engine.computed == ["a", "b", "c", "x", "y", "d", "e"]
    assert rec.order(JobDone) == ["first", "long"]


def test_the_engines_cost_is_fitted_from_each_segments_compute_to_its_first_audio(
    worker: ComputeWorker, clock: FakeClock
) -> None:
    """Every session's segments teach one cost model: a new session on a slow engine does
    not start from a guess. Queue waits are not the engine's: they are not counted."""
    assert worker.cost == DEFAULT_PRIOR  # an engine with no prior of its own
    rec = Recorder()
    for words in (1, 3):
        job = rec.speak(f"s{words}", " ".join(["word"] * words), deadline=clock())
        job.chars = 5 * words  # the fake's first audio is one step however long the text
        worker.submit(job)
    rec.wait(2)
    assert worker.cost == Cost(fixed=pytest.approx(STEP), per_char=0.0)  # type: ignore[arg-type]


def test_an_account_is_charged_the_audio_its_compute_was_worth(
    worker: ComputeWorker, clock: FakeClock
) -> None:
    """Each word is 0.1 s of audio for 0.01 s of compute, the cost the worker assumes at
    first: a real-time listener who started at the first word would have heard the job's
    0.5 s of audio 0.5 s later, and the account's clock says so."""
    account = Account()
    rec = Recorder()
    first_word_at = clock() + STEP
    worker.submit(rec.speak("s", "one two three four five", account=account))
    rec.wait(1)
    assert worker.cost_per_audio_second == pytest.approx(0.1)
    assert account.clock == pytest.approx(first_word_at + 0.5)


def test_an_account_given_more_than_it_could_hear_waits_behind_the_others(
    worker: ComputeWorker, engine: Costed, clock: FakeClock
) -> None:
    """A session that starts turns faster than it listens: its first segment waits as if its
    listener still had what it was given beyond the allowance in hand."""
    rec = Recorder()
    gate = hold(worker, engine, rec)
    now = clock()
    storm = Account(clock=now + ALLOWANCE + 5.0)  # given 5 s beyond the allowance
    listening = Account(clock=now + 2.0)  # 2 s in hand: within it
    worker.submit(rec.speak("storm", "storm1", first=True, deadline=now, account=storm))
    worker.submit(rec.speak("later", "later1", deadline=now + 6.0))
    worker.submit(rec.speak("calm", "calm1", deadline=now + 2.0, account=listening))
    worker.submit(rec.speak("calm-first", "hello", first=True, deadline=now, account=listening))
    gate.go.set()
    rec.wait(5)
    assert engine.computed == ["hold", "hello", "calm1", "storm1", "later1"]


def test_a_cancelled_job_stops_at_its_next_step_and_its_generator_is_closed_there(
    worker: ComputeWorker, engine: Costed
) -> None:
    rec = Recorder()
    job = rec.speak("long", "a b c d")
    record = job.on_event

    def cancel_after_the_first_chunk(event: JobEvent) -> None:
        record(event)
        worker.cancel(job)

    job.on_event = cancel_after_the_first_chunk
    worker.submit(job)
    worker.submit(rec.speak("probe", "p", deadline=1.0))  # after the long job's next turn
    rec.wait(1)
    assert rec.order(JobDone) == ["probe"]
    assert [type(e) for e in rec.of("long")] == [JobAudio]
    assert engine.computed == ["a", "p"]
    assert engine.closed == ["a b c d on voicews-compute"]


def test_a_job_cancelled_while_queued_never_runs(worker: ComputeWorker, engine: Costed) -> None:
    rec = Recorder()
    gate = hold(worker, engine, rec)
    queued = rec.speak("queued", "never")
    worker.submit(queued)
    worker.cancel(queued)
    worker.submit(rec.speak("probe", "p", deadline=1.0))
    gate.go.set()
    rec.wait(2)
    assert engine.computed == ["hold", "p"] and rec.of("queued") == []


def test_jobs_left_when_the_worker_stops_are_closed_on_its_thread(
    worker: ComputeWorker, engine: Costed
) -> None:
    """A job between two steps, and one cancelled while queued, are closed by the lane as it
    stops: a generation's generator holds thread-bound state (an MLX stream context) that
    fails when finalized on whichever thread drops the worker."""
    rec = Recorder()
    gate = hold(worker, engine, rec)
    engine.gates["b"] = mid = Gate()
    worker.submit(rec.speak("running", "a b c"))
    other = rec.speak("other", "x y", deadline=0.05)  # steps between "a" and "b"
    worker.submit(other)
    gate.go.set()
    assert mid.reached.wait(WAIT)
    assert engine.computed[-2:] == ["a", "x"]
    worker.cancel(other)  # queued, started
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    while not worker._stopping:
        time.sleep(0.001)
    mid.go.set()  # "running" ends its step and goes back to the queue: the lane is stopping
    stopper.join(WAIT)
    assert "a b c on voicews-compute" in engine.closed
    assert "x y on voicews-compute" in engine.closed


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
    worker: ComputeWorker, engine: Costed, clock: FakeClock
) -> None:
    """Each step of a long generation (agent mode) pushes its deadline back by its step; each
    step of a segment pushes its own back by the audio it gave (its listener has that more to
    hear)."""
    rec = Recorder()
    gate = Gate()

    def tokens(_engine: Engine) -> Iterator[str]:
        gate()
        for i in range(8):
            yield f" w{i}"

    now = clock()
    worker.submit(rec.job("generation", tokens, deadline=now, step=0.25))
    assert gate.reached.wait(WAIT)
    worker.submit(rec.speak("segment", "s1 s2", deadline=now + 0.95))
    gate.go.set()
    rec.wait(2)
    order = [
        event.text if isinstance(event, JobText) else name
        for name, event in rec.events
        if isinstance(event, JobText | JobAudio)
    ]
    # The generation is due at 0, 0.25, 0.5, 0.75, 1.0, ... after now; the segment at 0.95,
    # then at 1.05, once its first word (0.1 s) is in hand.
    assert order == [" w0", " w1", " w2", " w3", "segment", " w4", "segment", " w5", " w6", " w7"]
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


def test_a_pinned_job_is_taken_and_closed_only_by_the_lane_that_started_it() -> None:
    """A generation's generator holds thread-bound state (mlx-lm's stream context fails when
    closed on another thread): once a lane has run its first step, no other lane takes it, or
    closes it when it is cancelled."""
    plan = Planner()
    plan.lanes = 2
    rec = Recorder()
    here, elsewhere = threading.get_ident(), -1
    reply = rec.job("reply", synthesis("a", SynthesisOptions()))
    reply.pinned = True
    other = rec.job("other", synthesis("b", SynthesisOptions()), deadline=1.0)
    plan.queue = [reply, other]
    taken, _ = plan.take(here, 0.0)
    assert taken is reply and reply._lane == here  # pinned to the lane that took it
    reply._lane = elsewhere  # as if another lane had run its first step
    plan.queue = [reply, other]
    assert plan.take(here, 0.0) == (other, [])  # due later, but the one this lane may take
    reply.cancelled = other.cancelled = True
    plan.queue = [reply, other]
    assert plan.take(here, 0.0) == (None, [other])  # the pinned one is closed on its own lane
    assert plan.queue == [reply]


def test_crowded_while_more_listeners_have_audio_in_hand_than_the_worker_has_lanes() -> None:
    """Each step's compute is charged to its account as the audio it is worth: a listener has
    audio in hand until its clock; the worker is crowded while more have than it has lanes."""
    plan = Planner()
    plan.lanes = 2
    plan.cost_per_audio_second = 0.05
    rec = Recorder()
    accounts = [Account() for _ in range(3)]
    for index, account in enumerate(accounts):  # 0.05 s of compute: a second of audio each
        job = rec.job(f"s{index}", synthesis("a", SynthesisOptions()), account=account)
        plan.add(job, 0.0)
        plan.take(0, 0.0)
        plan.stepped(job, 1.0 + index, 0.05, 1.0, first_audio=False, more=False)
    assert (plan.listeners(1.5), plan.load(1.5).crowded) == (3, True)
    assert (plan.listeners(2.5), plan.load(2.5).crowded) == (2, False)  # the first has heard all
    assert plan.listeners(4.0) == 0


def test_a_reading_of_the_load_is_kept_until_the_queue_changes_or_it_grows_old() -> None:
    """Sessions read the load after every event and frame: a reading is kept while nothing it
    reads changed and it is at most ``LOAD_FRESH`` old; a submission or a cancellation (which
    the sessions reading next must see) makes the next one fresh."""
    now = [10.0]
    worker, rec = ComputeWorker(Costed, clock=lambda: now[0]), Recorder()  # never started
    first = worker.load()
    now[0] += LOAD_FRESH / 2
    assert worker.load() is first
    now[0] += LOAD_FRESH
    kept = worker.load()
    assert kept is not first  # too old
    job = rec.job("s", synthesis("Hello there.", SynthesisOptions()), deadline=11.0)
    job.chars = 12
    worker.submit(job)
    submitted = worker.load()
    assert submitted is not kept and len(submitted.queue) == 1 and not submitted.idle
    assert worker.load() is submitted
    worker.cancel(job)
    assert worker.load().queue == ()


def test_a_cheap_segment_of_a_playing_listener_goes_before_a_late_first_segment() -> None:
    """The job due first runs next; but a turn's first segment already past its due time
    yields to a listener's next segment whose latest start has come, where that one is cheap
    ("Hmm," playing, its "let me" behind fifteen late first segments in a burst), and the
    first segment is not yet late by more than ``YIELDS_WITHIN``."""
    cost = Cost(fixed=0.05, per_char=0.004)  # Piper: "let me" 74 ms, a sentence 250 ms
    rec = Recorder()
    late_first = rec.job("first", synthesis("Sure, I can", SynthesisOptions()), True, 0.0)
    later = rec.job("later", synthesis("let me", SynthesisOptions()), deadline=0.45)
    late_first.chars, later.chars = 11, 6
    # The first segment was due at 0.2; "let me" need not start before 0.376.
    assert next_job([late_first, later], cost, 0.3) is late_first
    assert next_job([late_first, later], cost, 0.38) is later
    assert next_job([late_first, later], cost, 0.41) is late_first  # late by over 0.2 s
    # Not before a first segment still within its due time, nor where the segment is dear.
    fresh = rec.job("fresh", synthesis("Okay.", SynthesisOptions()), True, 0.2)
    fresh.chars = 5
    assert next_job([fresh, later], cost, 0.38) is fresh  # due at 0.4
    later.chars, later.deadline = 50, 0.7  # 0.25 s of compute
    assert next_job([late_first, later], cost, 0.38) is late_first
    assert next_job([], cost, 0.0) is None


def test_a_held_back_account_never_takes_the_last_free_lane(clock: FakeClock) -> None:
    """Past its allowance an account's jobs use the lanes but one, so a listener's job never
    waits for one of theirs to finish."""
    engine = Costed(concurrent=True, clock=clock)
    engine.gates["storm1"] = gate = Gate()
    worker = started(engine, lanes=2, clock=clock)
    try:
        rec = Recorder()
        storm = Account(clock=clock() + ALLOWANCE + 5.0)
        worker.submit(rec.speak("storm-a", "storm1", first=True, deadline=clock(), account=storm))
        assert gate.reached.wait(WAIT)  # one lane runs the storm
        worker.submit(rec.speak("storm-b", "storm2", first=True, deadline=clock(), account=storm))
        worker.submit(rec.speak("calm", "calm1", deadline=clock() + 2.0, account=Account()))
        rec.wait(1)  # the calm job, on the lane the second storm job could not take
        assert engine.computed == ["calm1"]
        gate.go.set()
        rec.wait(2)
    finally:
        worker.stop()
    assert engine.computed == ["calm1", "storm1", "storm2"]


def test_a_segment_is_late_only_if_it_was_asked_for_in_time_and_waits_are_kept(
    worker: ComputeWorker, engine: Costed, clock: FakeClock
) -> None:
    rec = Recorder()
    gate = hold(worker, engine, rec, deadline=clock() + 1.0)
    now = clock()
    worker.submit(rec.speak("waited", "w", deadline=now + 0.05))  # would have made it at once
    worker.submit(rec.speak("asked-late", "l", deadline=now - 1.0))  # its listener was dry
    worker.submit(rec.speak("first", "f", first=True, deadline=now))  # no listener yet
    clock.now += 0.1  # the blocker takes its time
    gate.go.set()
    rec.wait(4)
    assert worker.stats.late() == (1, 3)  # of the blocker, "waited" and "asked-late"
    # "asked-late" waited longest, 0.12 s (the blocker's 0.1 + a word each for it and
    # "waited"): the wait lately, which sessions keep more audio in hand for; it halves in
    # every WAIT_HALF_LIFE in which no segment waits (two words have run since that one).
    since = 0.5 ** (2 * STEP / WAIT_HALF_LIFE)
    assert worker.queue_wait == pytest.approx(0.12 * since)
    clock.now += WAIT_HALF_LIFE
    assert worker.queue_wait == pytest.approx(0.06 * since)


def test_the_backlog_is_the_compute_queued_before_a_first_segment_asked_for_now(
    worker: ComputeWorker, engine: Costed, clock: FakeClock
) -> None:
    rec = Recorder()
    gate = hold(worker, engine, rec, deadline=clock() + 1.0)
    assert worker.load().backlog == 0.0  # running, not waiting
    now = clock()
    for name, deadline, chars in (
        ("due", now + 0.1, 40),
        ("later", now + 5.0, 40),
        ("first", now, 20),
    ):
        job = rec.speak(name, "w", first=name == "first", deadline=deadline)
        job.chars = chars
        worker.submit(job)
    # "due", and "first" (due FIRST_AUDIO_TARGET after it was asked for), go before a first
    # segment asked for now; "later" does not. One lane: all of their compute.
    cost = worker.cost
    load = worker.load()
    assert load.backlog == pytest.approx(cost.latency(40) + cost.latency(20))
    # The queue as sessions pace by it: each segment's due time from now and its compute,
    # due first first ("first" is due FIRST_AUDIO_TARGET after it was asked for).
    expected = [0.1, cost.latency(40), FIRST_AUDIO_TARGET, cost.latency(20)]
    expected += [5.0, cost.latency(40)]
    assert [x for entry in load.queue for x in entry] == pytest.approx(expected)
    # What a session syncs to: the worker's figures, read under one lock.
    assert load == Load(worker.queue_wait, cost, False, load.backlog, load.queue)
    gate.go.set()
    rec.wait(4)
    assert worker.load().backlog == 0.0


def test_overloaded_when_busy_lanes_keep_segments_waiting_or_listeners_run_dry() -> None:
    clock = FakeClock()
    busy = WorkerStats(lanes=2, clock=clock)
    busy.record(clock(), 2 * WINDOW * OVERLOAD_BUSY)
    assert busy.busy_ratio() == pytest.approx(OVERLOAD_BUSY)
    assert busy.overloaded(queue_wait=OVERLOAD_WAIT)
    assert not busy.overloaded(queue_wait=0.0)  # busy with work nobody waits behind
    clock.now += WINDOW + 1  # it was a while ago
    assert busy.busy_ratio() == 0.0 and not busy.overloaded(queue_wait=OVERLOAD_WAIT)

    late = WorkerStats(clock=clock)
    for i in range(100):
        late.sounded(clock(), late=i < 2)
    assert late.late() == (2, 100) and not late.overloaded(0.0)  # a couple: not yet
    late.sounded(clock(), late=True)
    assert not late.overloaded(0.0)  # 3 of 101: under OVERLOAD_LATE
    for _ in range(3):
        late.sounded(clock(), late=True)
    assert late.late() == (6, 104) and late.overloaded(0.0)


def test_an_engine_that_cannot_run_concurrently_gets_one_lane() -> None:
    worker = started(Costed(concurrent=False), lanes=4)
    worker.stop()
    assert worker.stats.lanes == 1
    with pytest.raises(ValueError, match="at least 1"):
        ComputeWorker(Costed, lanes=0)


# --- the C heap, given back when the worker falls idle ----------------------------------------


def fragment(kept: list[np.ndarray]) -> None:
    """Leave 40 MiB free inside the C heap, as a long input's inferences do: 400 buffers of
    100 KiB (below glibc's mmap threshold), all freed but the last, which holds the top of
    the heap, where alone glibc would shrink it."""
    buffers = [np.ones(100 * 1024, dtype=np.uint8) for _ in range(400)]
    kept.append(buffers[-1])


def test_a_trim_gives_back_what_was_freed_inside_the_heap() -> None:
    kept: list[np.ndarray] = []
    heap.trim()
    before = rss_now()
    fragment(kept)
    left = rss_now() - before
    heap.trim()
    assert left > 30 * 2**20 > 8 * 2**20 > rss_now() - before


def test_the_worker_trims_the_heap_once_it_falls_idle(
    worker: ComputeWorker, engine: Costed
) -> None:
    kept: list[np.ndarray] = []
    engine.gates["fragmenting"] = lambda: fragment(kept)
    rec = Recorder()
    heap.trim()
    before = rss_now()
    worker.submit(rec.speak("a", "one fragmenting job"))
    rec.wait(1)
    deadline = time.monotonic() + WAIT
    while rss_now() - before > 8 * 2**20:
        assert time.monotonic() < deadline, f"RSS +{(rss_now() - before) / 2**20:.0f} MiB kept"
        time.sleep(0.01)
    assert kept


# --- the real engine on two lanes --------------------------------------------------------------


def test_two_piper_lanes_keep_each_jobs_words_its_own() -> None:
    """espeak-ng keeps global state and is shared by the lanes: it is locked, so every job's
    words are its own text's, placed in order, while the inferences run side by side."""
    worker = ComputeWorker(engine_factory("piper"), lanes=2)
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
