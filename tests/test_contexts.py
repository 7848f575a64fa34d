"""Several contexts on one session, driven directly: no sockets, no threads, no clock."""

from __future__ import annotations

import time

from test_e2e import LONG
from test_session import drain, errors, make, one, speech, synthesize

from conftest import timeout
from voicews import protocol as wire
from voicews.client import RealtimeClient
from voicews.core.events import (
    AudioFrame,
    ContextClosed,
    Error,
    Outgoing,
    SegmentStarted,
    SessionUpdated,
    TurnDone,
    TurnStarted,
)
from voicews.core.session import Session
from voicews.dialects.realtime import apply
from voicews.errors import ErrorCode
from voicews.protocol import CloseContext, EndText, SessionUpdate, TextDelta, TurnReset


def open_two(s: Session) -> None:
    apply(s, TurnReset(turn_id="a1", context_id="a"), 0.0)
    apply(s, TurnReset(turn_id="b1", context_id="b"), 0.0)


def spoken_order(s: Session, now: float = 0.0, sent: list[Outgoing] | None = None) -> list[str]:
    """Synthesize every segment as the session asks for it, sending its audio at once (into
    ``sent``), time moving on while nothing is asked; the turn of each segment, in order."""
    order = []
    sent = [] if sent is None else sent
    for _ in range(100):
        subs = s.take_submissions()
        assert len(subs) <= 1  # one segment at a time across contexts
        if subs:
            order.append(subs[0].turn_id)
            synthesize(s, subs[0], 0.5, now)
        elif not s.wakeup_at(now) or s.wakeup_at(now) >= 20.0:  # type: ignore[operator]
            return order
        else:
            now = max(now, s.wakeup_at(now) or now)  # type: ignore[type-var]
            s.tick(now)
        sent += drain(s, now)
    raise AssertionError("the session never settled")


def test_contexts_take_turns_in_the_order_their_text_came() -> None:
    s = make()
    open_two(s)
    apply(s, TextDelta(text="Bee speaks first. It has two sentences.", context_id="b"), 0.0)
    apply(s, EndText(context_id="b"), 0.0)
    apply(s, TextDelta(text="Then comes ay.", context_id="a"), 0.01)
    apply(s, EndText(context_id="a"), 0.01)
    first = one(s)
    assert (first.turn_id, first.first) == ("b1", True)
    synthesize(s, first, 0.5, 0.1)
    items = drain(s, 0.1)
    order = ["b1", *spoken_order(s, 0.1, items)]
    assert order == sorted(order, reverse=True) and order[-1] == "a1"  # b's, then a's
    assert items[:2] == [
        TurnStarted(turn_id="a1", context_id="a"),
        TurnStarted(turn_id="b1", context_id="b"),
    ]
    # Every event and frame names its context; the frames are b's, then a's.
    tagged = [i for i in items if isinstance(i, AudioFrame | SegmentStarted | TurnDone)]
    assert all(i.context_id == {"a1": "a", "b1": "b"}[i.turn_id] for i in tagged)
    frames = [i.context_id for i in items if isinstance(i, AudioFrame)]
    assert frames == sorted(frames, reverse=True) and frames[-1] == "a"
    done = [i for i in items if isinstance(i, TurnDone)]
    assert [(d.context_id, d.cancelled) for d in done] == [("b", False), ("a", False)]


def test_a_context_whose_text_came_first_is_spoken_first_even_while_it_waits() -> None:
    s = make()
    open_two(s)
    apply(s, TextDelta(text="One sentence. And a second one, quite long.", context_id="a"), 0.0)
    apply(s, EndText(context_id="a"), 0.0)
    apply(s, TextDelta(text="Other.", context_id="b"), 0.0)
    apply(s, EndText(context_id="b"), 0.0)
    order = spoken_order(s)
    assert len(order) >= 3 and order == ["a1"] * (len(order) - 1) + ["b1"]


def test_closing_a_context_drops_its_queued_work_at_once() -> None:
    s = make()
    open_two(s)
    apply(s, TextDelta(text="A long first reply. And it goes on.", context_id="a"), 0.0)
    apply(s, TextDelta(text="Waiting.", context_id="b"), 0.0)
    apply(s, EndText(context_id="b"), 0.0)
    req = one(s)
    s.on_audio(req.job_id, speech(0.5), 0.05)  # a's audio is queued, its job still running
    assert any(isinstance(i, AudioFrame) and i.context_id == "a" for i in s.outbox)
    apply(s, CloseContext(context_id="a"), 0.06)
    assert s.take_cancellations() == [req.job_id]
    assert not any(isinstance(i, AudioFrame) and i.context_id == "a" for i in s.outbox)
    nxt = one(s)  # the engine is b's now
    assert nxt.turn_id == "b1"
    s.on_audio(req.job_id, speech(0.2), 0.07)  # the cancelled job's late audio goes nowhere
    items = drain(s, 0.07)
    assert TurnDone(turn_id="a1", samples=0, cancelled=True, heard_text="", context_id="a") in items
    assert ContextClosed(context_id="a", reason="closed") in items
    assert not any(isinstance(i, AudioFrame) for i in items)
    apply(s, TextDelta(text="more", context_id="a"), 0.08)
    refused = [i for i in drain(s, 0.08) if isinstance(i, Error)]
    assert [(e.code, e.context_id) for e in refused] == [(ErrorCode.NO_ACTIVE_TURN, "a")]


def test_one_context_too_many_is_refused_until_one_closes() -> None:
    s = make(max_contexts=2)
    open_two(s)
    apply(s, TurnReset(turn_id="c1", context_id="c"), 0.0)
    refused = [i for i in drain(s) if isinstance(i, Error)]
    assert [(e.code, e.context_id) for e in refused] == [(ErrorCode.TOO_MANY_CONTEXTS, "c")]
    apply(s, TurnReset(turn_id="a2", context_id="a"), 0.0)  # a new turn in an open one: fine
    apply(s, TurnReset(turn_id="t1"), 0.0)  # the unnamed context does not count
    apply(s, CloseContext(context_id="b"), 0.0)
    apply(s, TurnReset(turn_id="c1", context_id="c"), 0.0)
    assert errors(drain(s)) == []


def test_turn_ids_stay_unique_across_contexts_and_unknown_contexts_are_refused() -> None:
    s = make()
    apply(s, TurnReset(turn_id="t1", context_id="a"), 0.0)
    apply(s, TurnReset(turn_id="t1", context_id="b"), 0.0)
    apply(s, CloseContext(context_id="nope"), 0.0)
    apply(s, EndText(context_id="nope"), 0.0)
    assert errors(drain(s)) == [
        ErrorCode.DUPLICATE_TURN_ID,
        ErrorCode.NO_ACTIVE_TURN,
        ErrorCode.NO_ACTIVE_TURN,
    ]


def test_an_idle_context_is_closed_after_its_timeout_which_the_client_may_set() -> None:
    s = make()
    s.start(0.0)
    apply(s, TurnReset(turn_id="a1", context_id="a"), 0.0)
    apply(s, TextDelta(text="H", context_id="a"), 0.0)
    apply(s, TextDelta(text="i.", context_id="a"), 0.0)  # two at once: the text comes fast
    synthesize(s, one(s), 0.3, 0.1)  # spoken: the context now has nothing to do
    assert s.wakeup_at(0.1) == 20.0  # idle since its last message, 20 s by default
    s.tick(19.9)
    assert not any(isinstance(i, ContextClosed) for i in drain(s, 19.9))
    s.tick(20.0)
    items = drain(s, 20.0)
    assert TurnDone(turn_id="a1", samples=0, cancelled=True, heard_text="Hi.", context_id="a") in [
        replace_samples(i) for i in items
    ]
    assert items[-1] == ContextClosed(context_id="a", reason="idle_timeout")
    apply(s, SessionUpdate(context_idle_s=5), 21.0)
    assert isinstance(updated := drain(s, 21.0)[0], SessionUpdated)
    assert updated.context_idle_s == 5
    apply(s, TurnReset(turn_id="b1", context_id="b"), 21.0)
    assert s.wakeup_at(21.0) == 26.0
    s.tick(26.0)
    assert drain(s, 26.0)[-1] == ContextClosed(context_id="b", reason="idle_timeout")


def replace_samples(item: object) -> object:
    """A cut turn's ``samples`` counts what was sent: compare the rest."""
    if isinstance(item, TurnDone):
        return TurnDone(item.turn_id, 0, item.cancelled, item.heard_text, item.context_id)
    return item


def test_a_busy_context_is_not_idle() -> None:
    s = make()
    apply(s, TurnReset(turn_id="a1", context_id="a"), 0.0)
    apply(s, TextDelta(text="Still speaking when the clock runs.", context_id="a"), 0.0)
    req = one(s)
    assert s.wakeup_at(0.0) != 20.0
    s.tick(25.0)  # the segment is still with the engine
    assert not any(isinstance(i, ContextClosed) for i in drain(s, 25.0))
    synthesize(s, req, 1.0, 25.0)
    assert errors(drain(s, 25.0)) == []


async def test_contexts_on_a_real_server(client: RealtimeClient) -> None:
    """Two contexts on one socket: the first closed mid-speech goes silent at once, the other
    speaks on; every frame and event says its context."""
    await client.turn_reset("long", context_id="a")
    await client.turn_reset("short", context_id="b")
    await client.text_delta(LONG, context_id="a")
    await client.end_text(context_id="a")
    await client.text_delta("And now the other context speaks.", context_id="b")
    await client.end_text(context_id="b")
    item = await client.recv(timeout(20))
    while not isinstance(item, AudioFrame):
        item = await client.recv(timeout(20))
    assert item.context_id == "a"
    await client.close_context("a")
    closed_at = time.perf_counter()
    silent_after: float | None = None
    b_frames: list[AudioFrame] = []
    events: list[object] = []
    while True:
        item = await client.recv(timeout(20))
        if isinstance(item, AudioFrame) and item.context_id == "a":
            assert silent_after is None, "a frame of a closed context"
        elif isinstance(item, AudioFrame):
            b_frames.append(item)
        else:
            events.append(item)
            if isinstance(item, wire.ContextClosed):
                silent_after = time.perf_counter() - closed_at
            if isinstance(item, wire.TurnDone) and item.context_id == "b":
                break
    assert silent_after is not None and silent_after < 0.3
    assert b_frames and all(f.turn_id == "short" for f in b_frames)
    done = [e for e in events if isinstance(e, wire.TurnDone)]
    assert [(d.context_id, d.cancelled) for d in done] == [("a", True), ("b", False)]
    assert wire.ContextClosed(context_id="a", reason="closed") in events
    assert not [e for e in events if isinstance(e, wire.Error)]
