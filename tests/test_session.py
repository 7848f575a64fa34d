"""The session state machine, driven directly: no sockets, no threads, no clock."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from voicews.core.config import SessionConfig
from voicews.core.conversation import AgentConfig
from voicews.core.cost import Cost
from voicews.core.events import (
    AudioFrame,
    Error,
    Outgoing,
    Pong,
    ReplyDelta,
    SegmentStarted,
    SessionUpdated,
    TurnDone,
    TurnStarted,
    Words,
)
from voicews.core.jobs import GenerationRequest, SynthesisRequest
from voicews.core.pacing import Load
from voicews.core.pipeline import RECHECK
from voicews.core.session import Session
from voicews.dialects.realtime import apply, created
from voicews.encoding import OutputFormat
from voicews.errors import CloseCode, ErrorCode
from voicews.protocol import (
    AudioFormat,
    AudioUpdate,
    Cancel,
    EndText,
    Ping,
    Playback,
    SessionUpdate,
    TextDelta,
    TurnReset,
    UserMessage,
)

RATE = 22050
COST = Cost(fixed=0.1, per_char=0.005)
"""The engine's cost, as the compute worker would tell the session."""


def speech(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)


def make(audio: OutputFormat | None = None, **overrides: object) -> Session:
    config = replace(SessionConfig(), **overrides)  # type: ignore[arg-type]
    return Session("s1", RATE, config, audio)


def send(session: Session, now: float) -> Outgoing | None:
    """As the I/O layer does: take the next item, and tell the session it went out."""
    item = session.outbox.pop()
    if item is not None:
        session.sent(item, now)
    return item


def drain(session: Session, now: float = 0.0) -> list[Outgoing]:
    out = []
    while (item := send(session, now)) is not None:
        out.append(item)
    return out


def turn_of(*deltas: str | None, **overrides: object) -> Session:
    """A session paced at ``COST``, with no idle flush within a test's time, whose turn "t1"
    took ``deltas`` at t = 0 (None: ``end_text``)."""
    s = make(**{"idle_flush_ms": 10_000, **overrides})
    s.load(Load(0.0, COST))
    apply(s, TurnReset(turn_id="t1"), 0.0)
    for delta in deltas:
        apply(s, TextDelta(text=delta) if delta is not None else EndText(), 0.0)
    return s


def one(session: Session) -> SynthesisRequest:
    subs = session.take_submissions()
    assert len(subs) == 1, subs
    return subs[0]


def synthesize(session: Session, req: SynthesisRequest, seconds: float, now: float) -> None:
    session.on_audio(req.job_id, speech(seconds), now)
    session.on_done(req.job_id, now)


def errors(items: list[Outgoing]) -> list[ErrorCode]:
    return [i.code for i in items if isinstance(i, Error)]


def test_created_advertises_format_and_limits() -> None:
    hello = created(make(max_pending_text_chars=123), max_sessions=7)
    assert hello.audio.sample_rate == RATE and hello.protocol == 1
    assert (hello.limits.max_pending_text_chars, hello.limits.max_sessions) == (123, 7)


def test_turn_runs_to_done_with_ordered_frames() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, how are you today? I am"), 0.0)
    first = one(s)
    assert (first.text, first.first, first.options.eager) == ("Hello there,", True, True)
    synthesize(s, first, 0.8, 0.05)
    second = one(s)  # the next sentence is already complete
    assert (second.text, second.first, second.options.eager) == ("how are you today?", False, False)
    apply(s, TextDelta(text=" fine."), 0.1)
    apply(s, EndText(), 0.1)
    assert s.take_submissions() == []  # one job in flight per session
    synthesize(s, second, 1.2, 0.2)
    third = one(s)
    assert third.text == "I am fine."
    synthesize(s, third, 0.6, 0.3)
    items = drain(s, 0.3)
    assert items[0] == TurnStarted(turn_id="t1")
    assert isinstance(items[1], SegmentStarted) and items[1].start_sample == 0
    frames = [i for i in items if isinstance(i, AudioFrame)]
    assert [f.seq for f in frames] == list(range(len(frames)))
    position = 0
    for f in frames:
        assert f.start_sample == position and 0 < f.samples <= RATE * 40 // 1000
        position += f.samples
    segments = [i for i in items if isinstance(i, SegmentStarted)]
    assert [g.text for g in segments] == ["Hello there,", "how are you today?", "I am fine."]
    done = items[-1]
    assert isinstance(done, TurnDone)
    assert (done.turn_id, done.samples, done.cancelled) == ("t1", position, False)


def test_barge_in_drops_queued_audio_and_cancels_synthesis() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="One sentence here. Another one follows. "), 0.0)
    req = one(s)
    synthesize(s, req, 1.0, 0.1)
    in_flight = one(s)
    sent = [send(s, 0.1) for _ in range(3)]
    apply(s, TurnReset(turn_id="t2"), 0.2)
    assert s.take_cancellations() == [in_flight.job_id]
    items = drain(s, 0.2)
    assert items == [
        TurnDone(
            turn_id="t1",
            samples=sum(i.samples for i in sent if isinstance(i, AudioFrame)),
            cancelled=True,
            heard_text="One sentence",  # the eager first segment
        ),
        TurnStarted(turn_id="t2"),
    ]
    synthesize(s, in_flight, 1.0, 0.3)  # a late result of the cancelled job is ignored
    assert drain(s, 0.3) == []
    apply(s, TextDelta(text="New turn. "), 0.3)
    assert one(s).turn_id == "t2"


def test_cut_turn_reports_the_text_heard_by_the_clients_playback() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="First part here. Second part follows. Third part. "), 0.0)
    for _ in range(4):  # "First part" "here." "Second part follows." "Third part."
        synthesize(s, one(s), 1.0, 0.1)
        drain(s, 0.1)  # all four segments are sent, a second of audio each...
    apply(s, Playback(turn_id="t1", samples_played=50_000), 0.5)  # ...2.3 s played
    apply(s, TurnReset(turn_id="t2"), 0.5)
    done = next(i for i in drain(s, 0.5) if isinstance(i, TurnDone))
    assert done.heard_text == "First part here. Second part follows."
    assert done.samples > 80_000


@pytest.mark.parametrize("words_first", [False, True])
def test_placed_words_go_to_the_client_and_cut_heard_text_at_a_word(words_first: bool) -> None:
    """Engines place the words after the audio, or just before its last chunk (before any
    of it, for a segment of one chunk): they are placed once it sounds."""
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hi there. One two three four. "), 0.0)
    first = one(s)  # "Hi there."
    synthesize(s, first, 1.0, 0.1)
    second = one(s)
    assert second.text == "One two three four."
    silence = np.zeros(2205, np.float32)  # 100 ms of edge silence, trimmed to 15 ms
    audio = np.concatenate([silence, np.full(44100, 0.3, np.float32)])
    starts = [2205, 2205 + 11025, 2205 + 22050, 2205 + 33075]
    if words_first:
        s.on_words(second.job_id, starts)
    s.on_audio(second.job_id, audio, 0.2)
    if not words_first:
        s.on_words(second.job_id, starts)
    s.on_done(second.job_id, 0.2)
    items = drain(s, 0.2)
    segment = next(i for i in items if isinstance(i, SegmentStarted) and i.text == second.text)
    (words,) = [i for i in items if isinstance(i, Words)]
    lead = round(0.015 * RATE)  # the silence kept before the first sound
    assert [w.text for w in words.words] == ["One", "two", "three", "four."]
    assert [w.start_sample - segment.start_sample for w in words.words] == [
        lead,
        lead + 11025,
        lead + 22050,
        lead + 33075,
    ]
    # The listener heard "One two" and the start of "three": the cut keeps those words.
    played = words.words[2].start_sample + 1
    apply(s, Playback(turn_id="t1", samples_played=played), 0.5)
    apply(s, TurnReset(turn_id="t2"), 0.5)
    done = next(i for i in drain(s, 0.5) if isinstance(i, TurnDone))
    assert done.heard_text == "Hi there. One two three"


def test_a_miscounted_word_placement_leaves_the_segment_whole() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Red green blue gray. "), 0.0)
    apply(s, EndText(), 0.0)
    req = one(s)
    assert req.text == "Red green"
    s.on_audio(req.job_id, speech(1.0), 0.1)
    s.on_words(req.job_id, [0, 100, 200])  # three starts for two words
    s.on_done(req.job_id, 0.1)
    assert not any(isinstance(i, Words) for i in drain(s, 0.1))
    apply(s, Playback(turn_id="t1", samples_played=10), 0.2)
    apply(s, Cancel(), 0.2)
    done = next(i for i in drain(s, 0.2) if isinstance(i, TurnDone))
    assert done.heard_text == "Red green"


def test_cancel_cuts_the_turn_without_starting_another() -> None:
    s = make()
    apply(s, Cancel(), 0.0)
    assert errors(drain(s)) == [ErrorCode.NO_ACTIVE_TURN]
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, friend."), 0.0)
    req = one(s)
    apply(s, Cancel(), 0.1)
    assert s.take_cancellations() == [req.job_id]
    assert drain(s)[-1] == TurnDone(turn_id="t1", samples=0, cancelled=True, heard_text="")
    apply(s, TextDelta(text="more"), 0.2)
    assert errors(drain(s)) == [ErrorCode.NO_ACTIVE_TURN]


def test_refusals_are_typed_and_change_nothing() -> None:
    s = make(max_pending_text_chars=30, max_turn_text_chars=50)
    apply(s, TextDelta(text="hi"), 0.0)
    apply(s, EndText(), 0.0)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="x" * 31), 0.0)  # over the pending bound, no cut possible
    apply(s, TextDelta(text="a b c d e f g h i j k l m n"), 0.0)
    assert errors(drain(s)) == [
        ErrorCode.NO_ACTIVE_TURN,
        ErrorCode.NO_ACTIVE_TURN,
        ErrorCode.DUPLICATE_TURN_ID,
        ErrorCode.TEXT_BACKLOG_FULL,
    ]
    req = one(s)  # the refused delta left no trace; the accepted one is being spoken
    assert req.text == "a b"
    apply(s, EndText(), 0.0)
    apply(s, TextDelta(text="late"), 0.0)
    apply(s, EndText(), 0.0)
    assert errors(drain(s)) == [ErrorCode.TURN_CLOSED, ErrorCode.TURN_CLOSED]


def test_turn_text_limit_counts_all_text_of_the_turn() -> None:
    s = make(max_turn_text_chars=20)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, you."), 0.0)
    synthesize(s, one(s), 0.5, 0.1)
    apply(s, TextDelta(text=" And more"), 0.1)
    assert errors(drain(s)) == [ErrorCode.TURN_TEXT_TOO_LONG]
    apply(s, TextDelta(text=" Hi"), 0.1)  # exactly at the limit
    assert errors(drain(s)) == []


def test_slow_reader_pauses_synthesis_until_audio_is_read() -> None:
    s = make(max_pending_audio_ms=1000)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="First one. Second one. Third one. "), 0.0)
    synthesize(s, one(s), 1.5, 0.1)  # 1.5 s queued, over the 1 s bound
    assert s.take_submissions() == []
    assert s.wakeup_at(0.1) == 600.0  # paused: no timer but the turn-duration limit
    while s.outbox.samples >= RATE:
        send(s, 0.2)
    assert one(s).text == "Second one."


def idle_worker_turn(*deltas: str) -> Session:
    s = make(idle_flush_ms=500)
    s.load(Load(0.0, COST, idle=True))
    apply(s, TurnReset(turn_id="t1"), 0.0)
    for delta in deltas:
        apply(s, TextDelta(text=delta), 0.0)
    return s


def test_an_idle_worker_tries_the_first_words_before_the_next_token_confirms_them() -> None:
    """ "I see" waits for the next token ("seem"?); with the worker idle it is synthesized
    meanwhile, its audio held, and sent the moment a space confirms the word."""
    s = idle_worker_turn("I", " see")
    trial = one(s)
    assert (trial.text, trial.first) == ("I see", True)
    s.on_audio(trial.job_id, speech(0.5), 0.03)
    s.on_words(trial.job_id, [0, 2205])
    s.on_done(trial.job_id, 0.04)
    assert [type(i) for i in drain(s, 0.04)] == [TurnStarted]  # held: no audio yet
    apply(s, TextDelta(text=" your"), 0.05)
    items = drain(s, 0.05)
    assert [i.text for i in items if isinstance(i, SegmentStarted)] == ["I see"]
    assert sum(i.samples for i in items if isinstance(i, AudioFrame)) > 0.4 * RATE
    assert [w.text for i in items if isinstance(i, Words) for w in i.words] == ["I", "see"]
    apply(s, TextDelta(text=" order."), 0.1)
    apply(s, EndText(), 0.1)
    assert one(s).text == "your order."  # done: the next segment follows
    assert s.stats.trials == ["confirmed"]


def test_a_trial_whose_word_grows_is_dropped_and_cut_again() -> None:
    s = idle_worker_turn("I", " see")
    trial = one(s)
    s.on_audio(trial.job_id, speech(0.5), 0.03)
    apply(s, TextDelta(text="m"), 0.05)  # "seem": the trial said the wrong word
    assert s.take_cancellations() == [trial.job_id]
    again = one(s)
    assert (again.text, again.first) == ("I seem", True)  # a trial again, of the whole word
    s.on_audio(trial.job_id, speech(0.5), 0.06)  # the dropped job's late audio: ignored
    assert [type(i) for i in drain(s, 0.06)] == [TurnStarted]
    apply(s, TextDelta(text=" fine"), 0.1)
    synthesize(s, again, 0.5, 0.1)
    items = drain(s, 0.1)
    assert [i.text for i in items if isinstance(i, SegmentStarted)] == ["I seem"]
    assert s.stats.trials == ["dropped", "confirmed"]


def test_a_trial_ends_with_the_text_or_when_it_stops_coming() -> None:
    """All the text in, or none for ``idle_flush_ms``: the trial is dropped and the text cut
    as it would be without one (a two-word reply is spoken all the same)."""
    s = idle_worker_turn("I", " see")
    trial = one(s)
    apply(s, EndText(), 0.05)
    assert s.take_cancellations() == [trial.job_id]
    assert one(s).text == "I see"
    quiet = idle_worker_turn("I", " see")
    trial = one(quiet)
    assert quiet.wakeup_at(0.0) == 0.5
    quiet.tick(0.5)
    assert quiet.take_cancellations() == [trial.job_id]
    assert one(quiet).text == "I see"


def test_no_trial_while_the_worker_is_busy_or_for_what_may_still_grow() -> None:
    busy = make()
    apply(busy, TurnReset(turn_id="t1"), 0.0)
    apply(busy, TextDelta(text="I have"), 0.0)
    assert busy.take_submissions() == []  # the worker busy: no compute spent on a guess
    for text in ("", " ", "I", "At 10", "A well-"):  # no word; one; a number; one going on
        assert idle_worker_turn(text).take_submissions() == [], text


def test_idle_flush_speaks_text_that_stopped_mid_sentence() -> None:
    s = make(idle_flush_ms=500)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Checking"), 1.0)  # one word that may still grow
    assert s.take_submissions() == []
    assert s.wakeup_at(1.0) == 1.5
    s.tick(1.2)
    assert s.take_submissions() == []
    s.tick(1.5)
    assert one(s).text == "Checking"


def test_stall_guard_cuts_at_a_clause_before_the_listener_runs_dry() -> None:
    s = make(stall_guard_ms=400, idle_flush_ms=10_000)
    s.load(Load(0.0, COST))
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hi, the forecast for today is sunny, warm and "), 0.0)
    synthesize(s, one(s), 1.0, 0.1)
    drain(s, 0.1)  # the listener now has audio until about t = 1.1
    assert s.take_submissions() == []  # no sentence end yet, and audio in hand
    # "Hi," took no longer than the engine's cost: the 42 pending would take 0.1 + 0.21 s.
    play_end = 0.1 + 1.0 - 0.008  # less the crossfade tail held back
    wake = s.wakeup_at(0.1)
    assert wake is not None and abs(wake - (play_end - 0.4 - COST.latency(42))) < 0.001
    s.tick(wake)
    assert one(s).text == "the forecast for today is sunny,"


def test_an_idle_worker_takes_a_clause_while_the_listener_has_audio_in_hand() -> None:
    """The same text as above with the worker idle: the clause goes at once, not at the
    stall guard's time."""
    s = make(stall_guard_ms=400, idle_flush_ms=10_000)
    s.load(Load(0.0, COST, idle=True))
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hi, the forecast for today is sunny, warm and "), 0.0)
    synthesize(s, one(s), 1.0, 0.1)
    drain(s, 0.1)
    assert one(s).text == "the forecast for today is sunny,"


def test_stall_guard_grows_with_the_synthesis_latency_it_sees() -> None:
    s = make(stall_guard_ms=100, idle_flush_ms=10_000)
    s.load(Load(0.0, COST))
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hi, the forecast for today is sunny, warm and "), 0.0)
    synthesize(s, one(s), 3.0, 0.9)  # a slow worker: 0.9 s to the first audio of "Hi,"
    drain(s, 0.9)
    wake = s.wakeup_at(0.9)
    play_end = 0.9 + 3.0 - 0.008
    late = 0.9 - COST.latency(3)  # what came on top of the engine's cost
    assert wake is not None and abs(wake - (play_end - 0.1 - COST.latency(42) - late)) < 0.001


def test_a_replayed_first_segment_teaches_the_pacing_nothing() -> None:
    """The worker's phrase cache gives a turn's first segment again at once, for no compute:
    the lateness the session has seen stays what computed segments taught it. (Taken for calm
    compute, a replay changed how a Kokoro turn's next segment ended: the same text twice
    gave different audio.) Computed at once, the same first audio eases it."""
    text = "Hi, the forecast for today is sunny, warm and "
    late = 0.9 - COST.latency(3)  # the first turn's, on top of the engine's cost
    for replay, still_late in ((False, 0.9 * late), (True, late)):
        s = make(stall_guard_ms=100, idle_flush_ms=10_000)
        s.load(Load(0.0, COST))
        apply(s, TurnReset(turn_id="t1"), 0.0)
        apply(s, TextDelta(text=text), 0.0)
        synthesize(s, one(s), 3.0, 0.9)
        drain(s, 0.9)
        apply(s, TurnReset(turn_id="t2"), 10.0)
        apply(s, TextDelta(text=text), 10.0)
        first = one(s)
        s.on_audio(first.job_id, speech(3.0), 10.0, replay=replay)
        s.on_done(first.job_id, 10.0)
        drain(s, 10.0)
        wake = s.wakeup_at(10.0)
        play_end = 10.0 + 3.0 - 0.008
        expected = play_end - 0.1 - COST.latency(42) - still_late
        assert wake is not None and wake == pytest.approx(expected, abs=0.001), replay


def test_a_slower_engine_cuts_sooner() -> None:
    """The compute worker's cost model reaches the session: the same text, a costlier engine,
    an earlier cut."""
    wakes = []
    for cost in (COST, Cost(fixed=0.4, per_char=0.02)):
        s = make(stall_guard_ms=100, idle_flush_ms=10_000)
        s.load(Load(0.0, cost))
        apply(s, TurnReset(turn_id="t1"), 0.0)
        apply(s, TextDelta(text="Hi, the forecast for today is sunny, warm and "), 0.0)
        synthesize(s, one(s), 3.0, cost.latency(3))
        drain(s, cost.latency(3))
        wake = s.wakeup_at(cost.latency(3))
        assert wake is not None
        wakes.append(wake - cost.latency(3))  # from the first audio
    assert wakes[1] == pytest.approx(wakes[0] - (0.4 - 0.1) - (0.02 - 0.005) * 42)


def test_word_cuts_wait_until_the_listener_is_nearly_dry() -> None:
    # Clause at 0.475 s left, word at 0.275; two deltas at once: the text comes fast.
    s = turn_of("Sure, I can ", "help with", stall_guard_ms=300)
    synthesize(s, one(s), 1.0, 0.1)
    drain(s, 0.1)  # audio until about t = 1.09
    wakes = []
    while (wake := s.wakeup_at(wakes[-1] if wakes else 0.1)) is not None:
        wakes.append(wake)
        s.tick(wake)
        if subs := s.take_submissions():
            break
    assert [round(w, 2) for w in wakes] == [0.62, 0.82]
    # Nothing fits in the 0.275 s left with two thirds of the margin kept: the shortest piece
    # that gains ground makes the listener's wait the shortest ("I can" leads into its verb).
    assert [r.text for r in subs] == ["I can help"]


def test_with_all_the_text_in_a_sentence_too_long_to_fit_is_cut_once_critical() -> None:
    """Urgent, and no clause of the last sentence fits: the cut waits for the critical time,
    for which a timer is set though no more text can come."""
    s = turn_of("Sure, I can help with that and more today.", None, stall_guard_ms=300)
    synthesize(s, one(s), 0.5, 0.1)
    drain(s, 0.1)  # audio until about t = 0.59; the rest would take 0.28 s
    assert s.take_submissions() == []
    wake = s.wakeup_at(0.1)
    assert wake is not None and abs(wake - (0.592 - COST.latency(36) - 0.1)) < 0.001
    s.tick(wake)
    assert one(s).text == "I can help"  # fits with two thirds of the margin, before "with"


def test_rate_limit_refuses_messages_over_the_rate() -> None:
    s = make(max_messages_per_second=10)
    admitted = [s.admit(0.0) for _ in range(12)]
    assert admitted == [True] * 10 + [False] * 2
    assert errors(drain(s)) == [ErrorCode.RATE_LIMITED] * 2
    assert s.admit(0.1)  # a tenth of a second refills one message
    assert not s.admit(0.1)


def test_turn_duration_limit_cuts_the_turn() -> None:
    s = make(max_turn_seconds=5.0)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, a long one. "), 0.0)
    req = one(s)
    assert s.wakeup_at(0.0) == 5.0
    s.tick(5.0)
    assert s.take_cancellations() == [req.job_id]
    items = drain(s, 5.0)
    assert errors(items) == [ErrorCode.TURN_DURATION_EXCEEDED]
    assert items[-1] == TurnDone(turn_id="t1", samples=0, cancelled=True, heard_text="")


def test_idle_session_is_closed_after_the_idle_timeout() -> None:
    s = make(idle_timeout_s=30.0)
    s.start(0.0)
    assert s.wakeup_at(0.0) == 30.0
    s.admit(10.0)
    s.tick(30.0)
    assert s.close_request is None
    s.tick(40.0)
    assert errors(drain(s)) == [ErrorCode.IDLE_TIMEOUT]
    assert s.close_request is not None and s.close_request.code == CloseCode.NORMAL_CLOSURE


def test_idle_clock_starts_when_a_turn_ends() -> None:
    s = make(idle_timeout_s=30.0)
    s.start(0.0)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, friend."), 0.0)
    apply(s, EndText(), 0.0)
    synthesize(s, one(s), 0.5, 40.0)  # a long turn: it ends at t = 40
    synthesize(s, one(s), 0.5, 40.0)
    drain(s, 40.0)
    s.tick(41.0)
    assert s.close_request is None
    assert s.wakeup_at(41.0) == 70.0


def test_queued_events_count_events_not_frames() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, friend."), 0.0)
    apply(s, EndText(), 0.0)
    synthesize(s, one(s), 0.5, 0.1)
    apply(s, Ping(), 0.1)
    frames = sum(isinstance(i, AudioFrame) for i in s.outbox)
    assert frames > 5 and s.outbox.events == len(s.outbox) - frames == 3
    drain(s)
    assert s.outbox.events == 0


def test_draining_finishes_the_turn_then_asks_to_close() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Almost done."), 0.0)
    apply(s, EndText(), 0.0)
    req = one(s)
    s.drain(0.1)
    assert s.close_request is None
    apply(s, TurnReset(turn_id="t2"), 0.1)
    synthesize(s, req, 0.5, 0.2)
    items = drain(s, 0.2)
    assert errors(items) == [ErrorCode.SHUTTING_DOWN]
    assert items[-1] == TurnDone(
        turn_id="t1",
        samples=sum(i.samples for i in items if isinstance(i, AudioFrame)),
        cancelled=False,
    )
    assert s.close_request is not None and s.close_request.code == CloseCode.GOING_AWAY


def test_stats_record_first_audio_stalls_and_outcomes() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, you. "), 0.5)
    synthesize(s, one(s), 0.5, 0.6)
    drain(s, 0.7)
    synthesize(s, one(s), 0.5, 2.0)  # the listener ran dry near t = 1.2
    apply(s, EndText(), 2.0)
    drain(s, 2.0)
    assert [round(x, 3) for x in s.stats.first_audio] == [0.2]
    assert len(s.stats.stalls) == 1 and 0.75 < s.stats.stalls[0] < 0.85
    assert s.stats.turns == ["done"]


def test_engine_failure_ends_turn_and_session_goes_on() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, friend."), 0.0)
    s.on_failed(one(s).job_id, "boom", 0.1)
    items = drain(s)
    assert errors(items) == [ErrorCode.SYNTHESIS_FAILED]
    assert not any(isinstance(i, SegmentStarted) for i in items)  # nothing was spoken
    assert items[-1] == TurnDone(turn_id="t1", samples=0, cancelled=True)
    apply(s, TurnReset(turn_id="t2"), 0.2)
    apply(s, TextDelta(text="Still here."), 0.2)
    apply(s, EndText(), 0.2)
    assert one(s).turn_id == "t2"


def test_ping_is_answered_in_order() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, friend."), 0.0)
    synthesize(s, one(s), 0.5, 0.1)
    apply(s, Ping(id="p1"), 0.2)
    assert drain(s)[-1] == Pong(id="p1")


def test_speed_applies_to_next_segment() -> None:
    s = make()
    apply(s, SessionUpdate(speed=1.5), 0.0)
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Quick, please."), 0.0)
    assert one(s).options.speed == 1.5


def test_a_voice_update_is_acknowledged_and_a_refused_one_changes_nothing() -> None:
    s = make(voices=("af_heart", "bm_george"))
    assert created(s, max_sessions=1).voices == ["af_heart", "bm_george"]
    apply(s, SessionUpdate(speed=1.5), 0.0)
    assert drain(s)[-1] == SessionUpdated(audio=OutputFormat(RATE), speed=1.5,
                                          voice="af_heart")  # fmt: skip
    apply(s, SessionUpdate(voice="bm_george"), 0.0)
    assert isinstance(ack := drain(s)[-1], SessionUpdated) and ack.voice == "bm_george"
    apply(s, SessionUpdate(voice="alloy", speed=2.0, audio=AudioUpdate(sample_rate=8000)), 0.0)
    (refused,) = drain(s)
    assert isinstance(refused, Error) and refused.code == ErrorCode.INVALID_MESSAGE
    assert "'alloy'; choose from af_heart, bm_george" in refused.message
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Quick, please."), 0.0)
    req = one(s)
    assert (req.options.voice, req.options.speed) == ("bm_george", 1.5)  # neither refused
    assert s.audio.sample_rate == RATE  # the refused format did not apply either


def test_close_cancels_in_flight_job() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there, friend."), 0.0)
    req = one(s)
    s.close()
    assert s.take_cancellations() == [req.job_id]
    assert drain(s) == []


# --- agent mode: the text comes from a language model on the worker -----------------------------


def agent_session() -> Session:
    return make(agent=AgentConfig(system_prompt="Be brief.", max_history_messages=4))


def ask(s: Session, text: str, turn_id: str, now: float) -> GenerationRequest:
    apply(s, UserMessage(text=text, turn_id=turn_id), now)
    (request,) = s.take_submissions()
    assert isinstance(request, GenerationRequest) and request.turn_id == turn_id
    return request


def test_a_reply_is_spoken_as_it_is_written_and_kept_whole_once_done() -> None:
    s = agent_session()
    gen = ask(s, "Hello?", "r1", 0.0)
    assert gen.messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello?"},
    )
    s.on_text(gen.job_id, "Hi there, how", 0.1)
    first = one(s)  # the reply's first clause goes to synthesis at once
    assert (first.text, first.first) == ("Hi there,", True)
    apply(s, TextDelta(text="more"), 0.1)
    assert errors(drain(s, 0.1)) == [ErrorCode.TURN_CLOSED]  # the model writes this turn
    s.on_text(gen.job_id, " can I help?", 0.2)
    s.on_done(gen.job_id, 0.3)
    synthesize(s, first, 0.5, 0.3)
    synthesize(s, one(s), 0.8, 0.4)
    items = drain(s, 0.4)
    assert [i.text for i in items if isinstance(i, ReplyDelta)] == [" can I help?"]
    assert isinstance(items[-1], TurnDone) and not items[-1].cancelled
    assert s.history == [
        {"role": "user", "content": "Hello?"},
        {"role": "assistant", "content": "Hi there, how can I help?"},
    ]


def test_a_reply_cut_after_it_was_written_is_kept_once_as_heard() -> None:
    s = agent_session()
    gen = ask(s, "Tell me.", "r1", 0.0)
    s.on_text(gen.job_id, "First part here. Second part follows.", 0.0)
    s.on_done(gen.job_id, 0.0)  # written; it is still being spoken
    first = one(s)
    synthesize(s, first, 1.0, 0.1)
    last = one(s)
    drain(s, 0.1)
    apply(s, Playback(turn_id="r1", samples_played=1000), 0.3)  # the first segment began
    ask(s, "Stop.", "r2", 0.3)  # a barge-in
    assert s.take_cancellations() == [last.job_id]
    assert s.history == [
        {"role": "user", "content": "Tell me."},
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "Stop."},
    ]


def test_a_barge_in_while_writing_cancels_the_generation() -> None:
    s = agent_session()
    gen = ask(s, "Tell me a story.", "r1", 0.0)
    s.on_text(gen.job_id, "Once", 0.1)
    ask(s, "Never mind.", "r2", 0.2)
    assert s.take_cancellations() == [gen.job_id]
    s.on_text(gen.job_id, " upon a time", 0.3)  # late text of the cancelled reply: ignored
    assert not any(isinstance(i, ReplyDelta) and i.turn_id == "r2" for i in drain(s, 0.3))
    assert s.history == [  # nothing of the first reply was heard
        {"role": "user", "content": "Tell me a story."},
        {"role": "user", "content": "Never mind."},
    ]


def test_a_failed_generation_is_reported_and_what_was_written_is_spoken() -> None:
    s = agent_session()
    gen = ask(s, "Hi.", "r1", 0.0)
    s.on_text(gen.job_id, "Hello", 0.1)
    s.on_failed(gen.job_id, "RuntimeError: out of memory", 0.2)
    synthesize(s, one(s), 0.5, 0.3)
    items = drain(s, 0.3)
    assert errors(items) == [ErrorCode.GENERATION_FAILED]
    assert isinstance(items[-1], TurnDone) and not items[-1].cancelled
    assert s.history[-1] == {"role": "assistant", "content": "Hello"}


def test_a_user_message_needs_agent_mode() -> None:
    s = make()
    apply(s, UserMessage(text="Hi."), 0.0)
    assert errors(drain(s)) == [ErrorCode.AGENT_UNAVAILABLE]
    assert s.take_submissions() == [] and s.history == []


def test_frames_and_positions_are_at_the_output_rate() -> None:
    def second_segment_start(s: Session) -> tuple[int, list[AudioFrame]]:
        apply(s, TurnReset(turn_id="t1"), 0.0)
        apply(s, TextDelta(text="First one. Second one. "), 0.0)
        synthesize(s, one(s), 1.5, 0.1)  # 1.5 s queued, over the 1 s bound at any rate
        assert s.take_submissions() == [] and s.pending_audio_s >= 1.0
        frames = [i for i in drain(s, 0.2) if isinstance(i, AudioFrame)]
        second = one(s)
        s.on_audio(second.job_id, speech(0.5), 0.3)
        (segment,) = [i for i in s.outbox if isinstance(i, SegmentStarted)]
        return segment.start_sample, frames

    native, _ = second_segment_start(make(max_pending_audio_ms=1000))
    s = make(OutputFormat(44100, "pcm_mulaw"), max_pending_audio_ms=1000)
    assert created(s, max_sessions=1).audio == AudioFormat(sample_rate=44100, format="pcm_mulaw")
    start, frames = second_segment_start(s)
    assert start == 2 * native  # 44100 is twice the voice's 22050
    assert all(len(f.pcm) == f.samples <= 44100 * 40 // 1000 for f in frames)  # 1 byte each
    assert [f.start_sample for f in frames] == [
        sum(f.samples for f in frames[:i]) for i in range(len(frames))
    ]
    assert abs(sum(f.samples for f in frames) - 1.5 * 44100) < 0.05 * 44100


def test_a_format_update_applies_from_the_next_turn_and_a_refused_one_changes_nothing() -> None:
    def spoken(s: Session, turn_id: str, now: float) -> list[AudioFrame]:
        synthesize(s, one(s), 0.5, now)
        apply(s, EndText(), now)
        out = drain(s, now)
        assert isinstance(out[-1], TurnDone) and out[-1].turn_id == turn_id
        return [i for i in out if isinstance(i, AudioFrame)]

    s = make()
    apply(s, TurnReset(turn_id="t1"), 0.0)
    apply(s, TextDelta(text="Hello there. "), 0.0)
    apply(s, SessionUpdate(speed=1.5, audio=AudioUpdate(format="opus")), 0.0)
    opus = OutputFormat(48000, "opus")  # Opus is 48 kHz only
    assert drain(s) == [
        TurnStarted(turn_id="t1"),
        SessionUpdated(audio=opus, speed=1.5, live_turn_id="t1"),
    ]
    live = spoken(s, "t1", 0.1)
    assert all(len(f.pcm) == 2 * f.samples for f in live)  # t1 is still PCM16
    assert abs(sum(f.samples for f in live) - 0.5 * RATE) < 0.1 * RATE  # at the voice's rate
    apply(s, SessionUpdate(speed=2.0, audio=AudioUpdate(sample_rate=8000)), 0.2)  # Opus: no
    (refused,) = drain(s)
    assert isinstance(refused, Error) and refused.code == ErrorCode.INVALID_MESSAGE
    assert "opus" in refused.message
    apply(s, TurnReset(turn_id="t2"), 0.2)
    apply(s, TextDelta(text="Again. "), 0.2)
    assert s.take_submissions()[0].options.speed == 1.5  # the refused speed did not apply
    apply(s, Cancel(), 0.2)
    apply(s, TurnReset(turn_id="t3"), 0.3)
    apply(s, TextDelta(text="Again. "), 0.3)
    frames = spoken(s, "t3", 0.3)
    assert {f.samples for f in frames} == {960}  # one 20 ms Opus packet per frame
    assert abs(sum(f.samples for f in frames) - 0.5 * 48000) < 0.1 * 48000


def test_a_short_first_segments_next_is_due_when_its_audio_runs_out() -> None:
    """ "Hmm," is short by design: the next segment, asked for as soon as it is made, is due
    when its audio ends (queued for the socket, not yet sent), not at once."""
    s = turn_of("Hmm, let me see about that. ")
    first = one(s)
    assert first.text == "Hmm,"
    synthesize(s, first, 0.4, 0.1)  # made at 0.1; nothing sent yet
    second = one(s)
    assert second.text == "let me see about that."
    assert second.deadline == pytest.approx(0.1 + 0.4 - 0.008, abs=0.001)  # less the tail held


def audio_frames(items: list[Outgoing]) -> int:
    return sum(isinstance(i, AudioFrame) for i in items)


def test_a_first_segment_asked_for_before_the_text_rate_is_known_is_heard_once_it_is() -> None:
    """ "Hmm," said at once, with the rest of the reply at 5 tokens a second, left each word
    said on its own. Its audio is made at once and heard once the text's rate is known: at
    once where the text comes fast, after a lead of text where it comes slowly."""
    fast = turn_of("Hmm,")
    first = one(fast)
    assert first.text == "Hmm,"
    synthesize(fast, first, 0.4, 0.03)
    assert audio_frames(drain(fast, 0.03)) == 0  # made, held: the rate is not known
    apply(fast, TextDelta(text=" let"), 0.05)  # 20 tokens a second
    assert audio_frames(drain(fast, 0.05)) > 0

    slow = turn_of("Hmm,")
    synthesize(slow, one(slow), 0.4, 0.03)
    text = " let me check that for you, it will take a moment."
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    heard_at = None
    for i, piece in enumerate(pieces, 1):  # 5 tokens a second
        apply(slow, TextDelta(text=piece), 0.2 * i)
        if audio_frames(drain(slow, 0.2 * i)):
            heard_at = 0.2 * i
            break
    assert heard_at is not None and 1.0 < heard_at < 2.5  # a lead of text in hand first
    wake = slow.wakeup_at(heard_at)
    assert wake is not None and wake < heard_at + 0.4  # before "Hmm," has played out
    slow.tick(wake)
    second = one(slow)  # the next segment is a phrase, not a word
    assert len(second.text.split()) >= 3, second.text
    # Known now: the next turn's first segment waits for its lead before it is cut.
    assert slow._shared.pacing.rate_known


def test_a_first_segment_is_not_held_with_a_sentence_in_hand_or_the_text_ended() -> None:
    for deltas in (["Hmm, let me see about that. "], ["Hmm, yes", None]):
        s = turn_of(*deltas)
        synthesize(s, one(s), 0.4, 0.03)
        assert audio_frames(drain(s, 0.03)) > 0, deltas


def test_a_turn_whose_cut_times_passed_without_a_cut_looks_again() -> None:
    """The queue the urgency was read from changed before the timer was set (the worker runs
    on its own threads): every cut time has passed, yet no cut was made. A closed turn has no
    idle flush to wake it, and waited with its last sentence in hand (a soak under load)."""
    text = "And then we will go over every single thing you asked me about"
    s = turn_of("Okay. ", text, None, stall_guard_ms=300)
    synthesize(s, one(s), 0.7, 0.1)
    drain(s, 0.1)  # urgent, but the sentence does not fit and has no clause: no cut yet
    assert not s.take_submissions()
    s.load(Load(0.0, COST, queue=((0.0, 1.0),)))  # a second of compute due before it
    wake = s.wakeup_at(0.1)
    assert wake is not None and wake <= 0.1 + RECHECK + 1e-9
    s.tick(wake)
    assert one(s).text.startswith("And then")


def test_a_busy_worker_has_a_long_sentence_said_a_clause_at_a_time() -> None:
    """While segments wait for the worker, a later segment holds what the engine computes
    within ``BUSY_JOB`` (here 37 characters): synthesized whole before its first audio, a
    sentence's rest would hold a lane, and the listeners due behind it would wait. Calm, the
    sentence goes whole. Busy, the segment asks the engine to be lean."""
    engine = Cost(0.05, 0.004)
    text = "Sure, bring proof of address, such as a utility bill, and your account number. "
    for wait, expected in ((0.0, text[6:].strip()), (0.2, "bring proof of address,")):
        s = make(stall_guard_ms=150, idle_flush_ms=10_000)
        s.load(Load(wait, engine))
        apply(s, TurnReset(turn_id="t1"), 0.0)
        apply(s, TextDelta(text=text), 0.0)
        synthesize(s, one(s), 3.0, 0.1)
        drain(s, 0.1)
        if wait:
            assert s.take_submissions() == []  # no phrase within the cap is urgent yet
            wake = s.wakeup_at(0.1)
            assert wake is not None
            s.tick(wake)
        later = one(s)
        assert later.text == expected
        assert later.options.lean is bool(wait)  # an engine that can spend less, does
