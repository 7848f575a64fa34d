"""Short segments said before, given again without compute: the cache, the worker's use of
it on the fake engine of ``test_worker``, and a real server with the real voice."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from test_worker import Costed, Gate, Recorder, started

from conftest import TEST_CONFIG, running, timeout
from voicews.client import RealtimeClient
from voicews.compute.execution import ComputeWorker
from voicews.compute.jobs import JobAudio, JobDone, JobFailed, JobWords, synthesis
from voicews.compute.phrases import MAX_CHARS, PhraseCache
from voicews.engines.base import SynthesisOptions, WordStarts

PLAIN = SynthesisOptions()


def audio(samples: int, value: float = 0.1) -> JobAudio:
    return JobAudio(np.full(samples, value, dtype=np.float32))


def test_what_is_kept_is_given_again_as_copies_the_least_recent_out_first() -> None:
    cache = PhraseCache(max_samples=300)
    first, second = cache.key("Sure!", PLAIN), cache.key("Hmm,", PLAIN)
    assert first is not None and second is not None
    assert cache.key("x" * (MAX_CHARS + 1), PLAIN) is None  # too long to come again
    assert cache.key("Sure!", SynthesisOptions(eager=True)) != first  # options are the key's
    cache.put(first, [audio(100), JobWords(WordStarts((0,)))])
    got = cache.get(first)
    assert got is not None and [type(e) for e in got] == [JobAudio, JobWords]
    assert isinstance(got[0], JobAudio)
    got[0].audio[:] = 0.0  # the session's stitcher fades the copy, not what is kept
    again = cache.get(first)
    assert again is not None and isinstance(again[0], JobAudio)
    assert float(again[0].audio[0]) == np.float32(0.1) and cache.hits == 2
    cache.put(second, [audio(150)])
    assert cache.get(first) is not None  # now the most recent: "Hmm," goes first
    cache.put(cache.key("Okay.", PLAIN) or first, [audio(100)])
    assert cache.get(second) is None and len(cache) == 2 and cache.samples == 200
    cache.put(cache.key("Well,", PLAIN) or first, [audio(301)])  # more than all it keeps
    assert len(cache) == 2


def test_a_first_segment_said_before_is_given_again_at_once_without_the_engine() -> None:
    engine, rec = Costed(), Recorder()
    worker = ComputeWorker(lambda: engine, phrase_seconds=1.0)
    worker.start()
    try:
        worker.submit(rec.speak("once", "sure thing", first=True))
        rec.wait(1)
        worker.submit(rec.speak("again", "sure thing", first=True))
        rec.wait(1)
        eager = synthesis("sure thing", SynthesisOptions(eager=True))
        worker.submit(rec.job("other", eager, first=True))  # other options: computed
        rec.wait(1)
        worker.submit(rec.speak("later", "sure thing"))  # not a turn's first: computed
        rec.wait(1)
    finally:
        worker.stop()
    assert engine.computed == ["sure", "thing"] * 3
    once, again = rec.of("once"), rec.of("again")
    assert (
        [type(e) for e in again]
        == [type(e) for e in once]
        == [
            JobAudio,
            JobAudio,
            JobWords,
            JobDone,
        ]
    )
    for mine, theirs in zip(again, once, strict=True):
        if isinstance(mine, JobAudio) and isinstance(theirs, JobAudio):
            np.testing.assert_array_equal(mine.audio, theirs.audio)
            assert mine.replay and not theirs.replay  # a replay teaches the session nothing
    assert worker.phrases.hits == 1 and worker.stats.jobs_done == 3


def test_what_a_cut_or_failed_synthesis_gave_is_not_kept() -> None:
    engine, rec = Costed(), Recorder()
    worker = ComputeWorker(lambda: engine, phrase_seconds=1.0)
    worker.start()
    try:
        engine.gates["later"] = gate = Gate()
        cut = rec.speak("cut", "now later", first=True)
        worker.submit(cut)
        assert gate.reached.wait(10)
        worker.cancel(cut)
        gate.go.set()
        worker.submit(rec.speak("failed", "now explode", first=True))
        rec.wait(1)
        deadline = time.monotonic() + 10
        while worker.queued and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
    assert isinstance(rec.of("failed")[-1], JobFailed)
    assert len(worker.phrases) == 0


class Sounding(Costed):
    """The fake engine, saying which options change its audio: the look-ahead word does not."""

    def sounding(self, options: SynthesisOptions) -> SynthesisOptions:
        return replace(options, then="")


def test_options_the_engine_says_change_nothing_share_what_is_kept() -> None:
    engine, rec = Sounding(), Recorder()
    worker = ComputeWorker(lambda: engine, phrase_seconds=1.0)
    worker.start()
    try:
        for name, then in (("a", "now"), ("b", "later")):
            worker.submit(rec.job(name, synthesis("sure", SynthesisOptions(then=then)), first=True))
            rec.wait(1)
    finally:
        worker.stop()
    assert engine.computed == ["sure"] and worker.phrases.hits == 1


def test_off_nothing_is_kept() -> None:
    engine, rec = Costed(), Recorder()
    worker = started(engine)
    try:
        for name in ("a", "b"):
            worker.submit(rec.speak(name, "hello", first=True))
            rec.wait(1)
    finally:
        worker.stop()
    assert engine.computed == ["hello", "hello"] and worker.phrases.hits == 0


async def test_a_reply_opening_as_another_did_sounds_the_same_at_once() -> None:
    """Through a real server with the real voice: a second conversation opening with the same
    words gets the same first segment, from what the first one's synthesis gave."""
    async with running(TEST_CONFIG) as srv:
        turns = []
        for _ in range(2):
            async with await RealtimeClient.connect(srv.url) as client:
                turns.append(await client.speak("Sure!", timeout=timeout(60)))
        assert srv.worker.phrases.hits == 1
    first, second = turns
    assert first.pcm and first.pcm == second.pcm
