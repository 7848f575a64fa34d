"""The batched lane of the compute worker, on a fake engine that decodes in windows.

The engine computes nothing: each word of a text is one window (its frames the word's
length), a word ending in "." ends a sentence, and each decoder step records which words it
decoded together (each ``begin`` which sentences it began), so which windows were batched, in
which order, is exact. The real voice's batched audio is in ``test_mlx_piper.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np
from test_worker import WAIT, Gate, Recorder

from voicews.audio import Audio
from voicews.compute.execution import ComputeWorker
from voicews.compute.jobs import JobAudio, JobDone, JobFailed, JobText, JobWords
from voicews.engines.base import (
    Begin,
    SynthesisOptions,
    Window,
    WindowedEngine,
    Windows,
    WordStarts,
)

HOP = 10  # samples per frame


class Windowed:
    """One window per word, ``len(word)`` frames, bucketed to 4 or 8; its audio is the word's
    number, so each session's audio says whose window it was. "hold" waits at a gate before
    its window (the host part); "boom" fails the decoder step it is in."""

    name, device = "windowed", "none"
    sample_rate = 1000
    concurrent = False

    def __init__(
        self,
        max_batch: int = 8,
        batch_wait: float = 0.05,
        batched: bool = True,
        words_before_last: bool = False,
    ) -> None:
        self.batched, self.max_batch, self.batch_wait = batched, max_batch, batch_wait
        self.words_before_last = words_before_last  # as the MLX Piper engine places them
        self.words: list[str] = []
        self.steps: list[list[str]] = []
        self.gate: Gate | None = None
        self.closed: list[str] = []
        self.begun: list[list[str]] = []
        """The sentences each ``begin`` began together; one with "fizzle" fails it."""

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        for window in self.windows_of(text, options):
            if isinstance(window, Window):
                yield self.decode_windows([window])[0]

    def begin(self, sentences: Sequence[object]) -> list[object]:
        begun = [str(sentence) for sentence in sentences]
        if any("fizzle" in sentence for sentence in begun):
            raise RuntimeError("injected begin fault")
        self.begun.append(begun)
        return list(begun)

    def windows_of(self, text: str, options: SynthesisOptions) -> Windows:
        try:
            words = text.split()
            for i, word in enumerate(words):
                if i == 0 or words[i - 1].endswith("."):
                    ends = (j for j, w in enumerate(words[i:], i) if w.endswith("."))
                    sentence = " ".join(words[i : next(ends, len(words)) + 1])
                    made = yield Begin(sentence)
                    assert made in (None, sentence)  # its own, if any
                if word == "hold" and self.gate is not None:
                    self.gate()
                self.words.append(word)
                z = np.full((len(word), 1), len(self.words) - 1, dtype=np.float32)
                if self.words_before_last and i == len(words) - 1:
                    yield WordStarts((0,))
                yield Window(z, 0, len(word))
            if not self.words_before_last:
                yield WordStarts((0,))
        except GeneratorExit:
            self.closed.append(text)
            raise

    def window_bucket(self, frames: int) -> int:
        return 4 if frames <= 4 else 8

    def decode_windows(self, windows: Sequence[Window]) -> list[Audio]:
        words = [self.words[int(w.z[0, 0])] for w in windows]
        self.steps.append(words)
        if "boom" in words:
            raise RuntimeError("injected decoder fault")
        return [np.full(w.frames * HOP, w.z[0, 0], dtype=np.float32) for w in windows]


def started(engine: Windowed) -> ComputeWorker:
    worker = ComputeWorker(lambda: engine)
    worker.start()
    return worker


def held(engine: Windowed, worker: ComputeWorker, rec: Recorder) -> Gate:
    """The lane held in a job's host part: what is submitted meanwhile is taken together."""
    engine.gate = gate = Gate()
    worker.submit(rec.speak("blocker", "hold"))
    assert gate.reached.wait(WAIT)
    return gate


def audio_words(engine: Windowed, rec: Recorder, name: str) -> list[str]:
    """The words whose audio ``name``'s session got, in order."""
    chunks = [e.audio for e in rec.of(name) if isinstance(e, JobAudio)]
    return [engine.words[int(chunk[0])] for chunk in chunks]


def test_the_engine_is_windowed() -> None:
    assert isinstance(Windowed(), WindowedEngine)


def test_sessions_ready_together_are_decoded_in_one_step_each_gets_its_own_audio() -> None:
    engine, rec = Windowed(max_batch=8), Recorder()
    worker = started(engine)
    try:
        gate = held(engine, worker, rec)
        for name, text in (("a", "one two"), ("b", "red tan"), ("c", "sun moon")):
            worker.submit(rec.speak(name, text, deadline=time.monotonic()))
        gate.go.set()
        rec.wait(4)
    finally:
        worker.stop()
    # The blocker's window, its listener dry, waited for the windows still coming, in deadline
    # order; then the three sessions' second windows went together.
    assert engine.steps == [["hold", "one", "red", "sun"], ["two", "tan", "moon"]]
    assert worker.stats.batches == 2 and worker.stats.largest_batch == 4
    for name, words in (("a", ["one", "two"]), ("b", ["red", "tan"]), ("c", ["sun", "moon"])):
        assert audio_words(engine, rec, name) == words
        events = rec.of(name)
        assert [type(e) for e in events] == [JobAudio, JobAudio, JobWords, JobDone]
        assert [len(e.audio) for e in events if isinstance(e, JobAudio)] == [
            len(w) * HOP for w in words
        ]


def test_syntheses_that_start_together_are_begun_in_one_batch_in_deadline_order() -> None:
    """Their first sentences' encoders, durations and flows in one host step (``begin``),
    as their windows decode in one; the job already running is not begun again."""
    engine, rec = Windowed(max_batch=8), Recorder()
    worker = started(engine)
    now = time.monotonic()
    try:
        gate = held(engine, worker, rec)
        for name, due in (("b", 2.0), ("a", 1.0), ("c", 3.0)):
            worker.submit(rec.speak(name, f"{name}1 {name}2", deadline=now + due))
        gate.go.set()
        rec.wait(4)
        worker.submit(rec.speak("alone", "solo"))  # one at a time: begun as before
        rec.wait(1)
    finally:
        worker.stop()
    assert engine.begun == [["a1 a2", "b1 b2", "c1 c2"]]
    assert worker.stats.begun_batches == 1 and worker.stats.begun_sentences == 3
    for name in "abc":
        assert audio_words(engine, rec, name) == [f"{name}1", f"{name}2"]
    assert audio_words(engine, rec, "alone") == ["solo"]


def test_later_sentences_begun_in_one_host_step_are_begun_in_one_batch() -> None:
    """A segment's second sentence begins when its windows come: where several sessions'
    come in one host step, together, as their first sentences did."""
    engine, rec = Windowed(max_batch=8), Recorder()
    worker = started(engine)
    try:
        gate = held(engine, worker, rec)
        for name in "ab":
            worker.submit(rec.speak(name, f"{name}1. {name}2", deadline=time.monotonic()))
        gate.go.set()
        rec.wait(3)
    finally:
        worker.stop()
    assert engine.begun == [["a1.", "b1."], ["a2", "b2"]]
    assert worker.stats.begun_batches == 2 and worker.stats.begun_sentences == 4
    for name in "ab":
        assert audio_words(engine, rec, name) == [f"{name}1.", f"{name}2"]


def test_where_beginning_together_fails_each_sentence_begins_alone() -> None:
    engine, rec = Windowed(max_batch=8), Recorder()
    worker = started(engine)
    try:
        gate = held(engine, worker, rec)
        worker.submit(rec.speak("odd", "fizzle", deadline=time.monotonic()))
        worker.submit(rec.speak("fine", "fine words", deadline=time.monotonic()))
        gate.go.set()
        rec.wait(3)
    finally:
        worker.stop()
    assert engine.begun == []
    assert audio_words(engine, rec, "odd") == ["fizzle"]
    assert audio_words(engine, rec, "fine") == ["fine", "words"]


def test_a_synthesis_that_placed_its_words_ends_with_its_last_window() -> None:
    """Words placed just before the last window: the decoder step of that window ends the
    job too, so its session may ask for its next segment at once, not after the windows of
    every session due sooner (as ``_step`` does on a plain lane)."""
    engine, rec = Windowed(batch_wait=0.0, words_before_last=True), Recorder()
    worker = started(engine)
    now = time.monotonic()
    try:
        gate = held(engine, worker, rec)
        worker.submit(rec.speak("ends", "one two", deadline=now))
        worker.submit(rec.speak("sooner", "red tan sun", deadline=now - 1.0))
        gate.go.set()
        rec.wait(3)
    finally:
        worker.stop()
    assert [type(e) for e in rec.of("ends")] == [JobAudio, JobWords, JobAudio, JobDone]
    assert audio_words(engine, rec, "sooner") == ["red", "tan", "sun"]
    done = rec.events.index(("ends", rec.of("ends")[-1]))
    sun = rec.events.index(("sooner", rec.of("sooner")[2]))
    assert done < sun


def test_a_full_batch_goes_at_once_in_deadline_order_the_rest_after() -> None:
    engine, rec = Windowed(max_batch=2, batch_wait=0.5), Recorder()
    worker = started(engine)
    now = time.monotonic()
    try:
        gate = held(engine, worker, rec)
        for name, due in (("late", 9.0), ("soon", 1.0), ("next", 2.0), ("last", 20.0)):
            worker.submit(rec.speak(name, name, deadline=now + due))
        gate.go.set()
        rec.wait(5)  # a window left alone goes at its deadline
    finally:
        worker.stop()
    first, *_ = engine.steps
    assert first == ["hold", "soon"]  # the blocker's deadline (0) first, then "soon"
    assert ["next", "late"] in engine.steps and ["last"] in engine.steps


def test_windows_of_other_buckets_are_decoded_apart() -> None:
    engine, rec = Windowed(max_batch=8, batch_wait=0.02), Recorder()
    worker = started(engine)
    try:
        gate = held(engine, worker, rec)
        worker.submit(rec.speak("short", "hi", deadline=time.monotonic()))
        worker.submit(rec.speak("long", "goodbye", deadline=time.monotonic()))
        gate.go.set()
        rec.wait(3)
    finally:
        worker.stop()
    assert sorted(map(sorted, engine.steps)) == [["goodbye"], ["hi", "hold"]]


def test_a_window_of_a_cut_turn_is_never_decoded_and_its_generator_is_closed() -> None:
    engine, rec = Windowed(max_batch=8, batch_wait=0.3), Recorder()
    worker = started(engine)
    try:
        gate = held(engine, worker, rec)
        job = rec.speak("cut", "never decoded", deadline=time.monotonic() + 10)
        worker.submit(job)
        worker.submit(rec.speak("kept", "kept", deadline=time.monotonic()))
        gate.go.set()
        deadline = time.monotonic() + WAIT
        while "never" not in engine.words:  # its window waits for company
            assert time.monotonic() < deadline
            time.sleep(0.001)
        worker.cancel(job)
        rec.wait(2)
    finally:
        worker.stop()
    assert all("never" not in step for step in engine.steps)
    assert engine.closed == ["never decoded"]
    assert not [e for e in rec.of("cut") if isinstance(e, JobAudio)]


def test_work_without_windows_runs_step_by_step_and_a_failed_step_fails_its_batch() -> None:
    engine, rec = Windowed(max_batch=8, batch_wait=0.02), Recorder()
    worker = started(engine)
    try:
        gate = held(engine, worker, rec)
        worker.submit(rec.job("reply", lambda _: iter(["Hel", "lo"]), deadline=time.monotonic()))
        worker.submit(rec.speak("bad", "boom", deadline=time.monotonic()))
        gate.go.set()
        rec.wait(3)
        worker.submit(rec.speak("after", "fine"))  # the worker goes on
        rec.wait(1)
    finally:
        worker.stop()
    assert [e.text for e in rec.of("reply") if isinstance(e, JobText)] == ["Hel", "lo"]
    assert isinstance(rec.of("bad")[-1], JobFailed)
    assert isinstance(rec.of("blocker")[-1], JobFailed)  # it shared the failed step
    assert audio_words(engine, rec, "after") == ["fine"]


def test_an_engine_that_does_not_batch_gets_the_plain_lane() -> None:
    engine, rec = Windowed(batched=False), Recorder()
    worker = started(engine)
    try:
        worker.submit(rec.speak("a", "one two"))
        rec.wait(1)
    finally:
        worker.stop()
    assert worker.stats.batches == 0 and engine.steps == [["one"], ["two"]]


def test_stopping_closes_the_generators_of_windows_still_waiting() -> None:
    engine, rec = Windowed(max_batch=8, batch_wait=30.0), Recorder()
    worker = started(engine)
    worker.submit(rec.speak("waits", "waiting", deadline=time.monotonic() + 60))
    deadline = time.monotonic() + WAIT
    while "waiting" not in engine.words:  # its window waits for company, 30 s at most
        assert time.monotonic() < deadline
        time.sleep(0.001)
    worker.stop()
    assert engine.steps == [] and engine.closed == ["waiting"]
