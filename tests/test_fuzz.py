"""Property-based fuzzing of what a client can send: normal handling or a typed error, always.

Two levels: the sans-I/O session driven with arbitrary frames, job results and clock ticks;
and a real server on loopback fed arbitrary text and binary frames over one connection.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from conftest import running, timeout, with_session
from voicews.core import events as core
from voicews.core.config import SessionConfig
from voicews.core.cost import DEFAULT_PRIOR
from voicews.core.pacing import Load
from voicews.core.session import Session
from voicews.dialects.realtime import apply
from voicews.errors import SESSION_CODES, VoicewsError
from voicews.protocol import (
    CLIENT_TYPES,
    ENCODINGS,
    SAMPLE_RATES,
    Error,
    Pong,
    TurnDone,
    decode_frame,
    parse_client_message,
    parse_server_event,
)
from voicews.server import VoicewsServer

KNOWN_CODES = {c.value for c in SESSION_CODES}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
typed_objects = st.fixed_dictionaries(
    {"type": st.sampled_from(CLIENT_TYPES)},
    optional={
        "turn_id": st.sampled_from(["a", "b", "c", ""]) | json_values,
        "text": st.text(max_size=40) | json_values,
        "speed": st.floats(0.1, 3.0) | json_values,
        "id": st.text(max_size=5) | json_values,
        "extra": json_values,
    },
)
wellformed = st.one_of(
    st.builds(lambda t: {"type": "turn_reset", "turn_id": t}, st.sampled_from("abcd")),
    st.builds(lambda t: {"type": "text_delta", "text": t}, st.text(max_size=40)),
    st.just({"type": "end_text"}),
    # contexts: several turns at once on the session
    st.builds(
        lambda t, c: {"type": "turn_reset", "turn_id": t, "context_id": c},
        st.sampled_from("abcdef"),
        st.sampled_from("xy"),
    ),
    st.builds(
        lambda t, c: {"type": "text_delta", "text": t, "context_id": c},
        st.text(max_size=40),
        st.sampled_from("xy"),
    ),
    st.builds(lambda c: {"type": "end_text", "context_id": c}, st.sampled_from("xy")),
    st.builds(lambda c: {"type": "close_context", "context_id": c}, st.sampled_from("xyz")),
    st.builds(lambda v: {"type": "session_update", "speed": v}, st.floats(0.25, 4.0)),
    st.builds(
        lambda rate, fmt: {"type": "session_update", "audio": {"sample_rate": rate, "format": fmt}},
        st.sampled_from((*SAMPLE_RATES, 11025)),
        st.sampled_from((*ENCODINGS, "mp3")),
    ),
    st.builds(
        lambda rate: {"type": "session_update", "audio": {"sample_rate": rate}},
        st.sampled_from(SAMPLE_RATES),
    ),
)
frames = st.one_of(
    wellformed.map(json.dumps),
    typed_objects.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=60),
    st.binary(max_size=60),
)


@dataclass(frozen=True)
class Advance:
    seconds: float


@dataclass(frozen=True)
class Synthesize:
    seconds: float
    words: bool  # the engine also places the segment's words


@dataclass(frozen=True)
class Idle:
    idle: bool  # the compute worker is idle (the session may try a first segment)


actions = st.lists(
    st.one_of(
        frames,
        st.floats(0.0, 1.5).map(Advance),
        st.builds(Synthesize, st.floats(0.0, 0.5), st.booleans()),
        st.booleans().map(Idle),
    ),
    max_size=40,
)


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 22050)) / 22050
    return (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


# Seeded (derandomize): the same 300 cases each run, so CI never fails on a case found by chance.
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(actions)
@example(  # a closed turn's last piece, too long to fit, waits for its critical cut's timer
    [
        '{"type": "turn_reset", "turn_id": "a"}',
        '{"type": "text_delta", "text": "0"}',
        Advance(1.0),
        '{"type": "text_delta", "text": ":"}',
        Synthesize(0.125, False),
    ]
)
@example(  # trials of the first words: one whose word grows, one the next token confirms
    [
        Idle(True),
        '{"type": "turn_reset", "turn_id": "a"}',
        '{"type": "text_delta", "text": "I have"}',
        Synthesize(0.3, True),
        '{"type": "text_delta", "text": "n\'t"}',
        Synthesize(0.3, True),
        '{"type": "text_delta", "text": " seen it"}',
        Synthesize(0.3, False),
    ]
)
def test_session_survives_any_sequence_of_frames(steps: list[object]) -> None:
    session = Session("fuzz", 22050, SessionConfig(max_pending_text_chars=200))
    now, in_flight, sent = 0.0, [], []

    def pump() -> None:
        in_flight.extend(session.take_submissions())
        session.take_cancellations()
        while (item := session.outbox.pop()) is not None:
            session.sent(item, now)
            sent.append(item)

    for step in [*steps, "final"]:
        if isinstance(step, Advance):
            now += step.seconds
            session.tick(now)
        elif isinstance(step, Idle):
            session.load(Load(0.0, DEFAULT_PRIOR, step.idle))
        elif isinstance(step, Synthesize):
            if in_flight:
                job = in_flight.pop(0)
                audio = tone(step.seconds)
                session.on_audio(job.job_id, audio, now)
                if step.words:
                    count = len(job.text.split())
                    session.on_words(job.job_id, [i * len(audio) // count for i in range(count)])
                session.on_done(job.job_id, now)
        elif step == "final":
            apply(session, parse_client_message('{"type": "end_text"}'), now)
        else:
            assert isinstance(step, str | bytes)
            before = len(session.outbox)
            if session.admit(now):
                try:
                    message = parse_client_message(step)
                except VoicewsError as exc:
                    session.report(exc)
                    assert len(session.outbox) == before + 1  # refused: exactly one error
                else:
                    apply(session, message, now)
        pump()
    for _ in range(1000):  # let every turn run out, its timers firing as they would
        if not (in_flight or speaking(sent)):
            break
        if in_flight:
            job = in_flight.pop(0)
            session.on_audio(job.job_id, tone(0.1), now)
            session.on_done(job.job_id, now)
        else:  # a cut waits for its time (a sentence too long to fit, for the critical one)
            wake = session.wakeup_at(now)
            assert wake is not None
            now = max(now, wake)
            session.tick(now)
        pump()
    check_stream(sent)


def speaking(sent: list[object]) -> bool:
    """A turn started and not yet done, in any context."""
    live: set[str] = set()
    for item in sent:
        if isinstance(item, core.TurnStarted):
            live.add(item.turn_id)
        elif isinstance(item, core.TurnDone):
            live.discard(item.turn_id)
    return bool(live)


def check_stream(sent: list[object]) -> None:
    """In each context: every started turn is done exactly once; frames are contiguous and
    turn_done counts them, whatever the format; errors are typed; a words event places its
    segment's words, in order, from where the segment starts. A closed context sends nothing
    more until it is opened again."""
    contexts: dict[str | None, _Stream] = {}
    for item in sent:
        if isinstance(item, core.Error):
            assert item.code in KNOWN_CODES and item.message
            continue
        key = getattr(item, "context_id", None)
        s = contexts.setdefault(key, _Stream())
        if isinstance(item, core.SegmentStarted):
            assert item.turn_id == s.open_turn
            s.segment = item
        elif isinstance(item, core.Words):
            assert s.segment is not None and item.turn_id == s.segment.turn_id == s.open_turn
            assert " ".join(w.text for w in item.words) == " ".join(s.segment.text.split())
            starts = [w.start_sample for w in item.words]
            assert starts == sorted(starts) and starts[0] >= s.segment.start_sample
            s.segment = None  # one words event per segment
        elif isinstance(item, core.TurnStarted):
            assert s.open_turn is None and item.turn_id != s.latest  # duplicate_turn_id
            s.open_turn, s.seq, s.latest, s.position = item.turn_id, 0, item.turn_id, 0
        elif isinstance(item, core.AudioFrame):
            assert item.turn_id == s.open_turn and item.seq == s.seq
            assert item.start_sample == s.position and item.samples > 0
            s.seq, s.position = s.seq + 1, s.position + item.samples
        elif isinstance(item, core.TurnDone):
            assert item.turn_id == s.open_turn and item.samples == s.position
            s.open_turn = None
        elif isinstance(item, core.ContextClosed):
            assert s.open_turn is None  # its turn was cut first
            del contexts[key]
    assert all(s.open_turn is None for s in contexts.values())


@dataclass
class _Stream:
    """One context's stream as the client sees it."""

    open_turn: str | None = None
    seq: int = 0
    latest: str | None = None
    position: int = 0
    segment: core.SegmentStarted | None = None


@pytest.fixture(scope="module")
def threaded_server() -> Iterator[VoicewsServer]:
    """A real server on its own event loop thread, for the synchronous fuzzing client."""
    started = threading.Event()
    stop: asyncio.Event | None = None
    holder: list[VoicewsServer] = []
    loop = asyncio.new_event_loop()

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        # No rate limit here: the fuzzer's pace is not what is under test.
        async with running(with_session(max_messages_per_second=100_000)) as srv:
            holder.append(srv)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(60)
    yield holder[0]
    assert stop is not None
    loop.call_soon_threadsafe(stop.set)
    thread.join(30)
    loop.close()


@pytest.fixture(scope="module")
def connection(threaded_server: VoicewsServer) -> Iterator[ClientConnection]:
    with connect(threaded_server.url) as ws:
        ws.recv(timeout(10))  # session_created
        yield ws


def until_pong(ws: ClientConnection, probe: str) -> list[object]:
    seen: list[object] = []
    while True:
        data = ws.recv(timeout(10))
        item = decode_frame(data) if isinstance(data, bytes) else parse_server_event(data)
        if item == Pong(id=probe):
            return seen
        seen.append(item)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(frame=frames)
def test_server_answers_any_frame_and_stays_up(
    connection: ClientConnection, frame: str | bytes
) -> None:
    connection.send(frame)
    connection.send('{"type": "ping", "id": "probe"}')
    for item in until_pong(connection, "probe"):
        if isinstance(item, Error):
            assert item.code in KNOWN_CODES and item.message


def test_server_still_speaks_after_fuzzing(
    connection: ClientConnection, threaded_server: VoicewsServer
) -> None:
    connection.send('{"type": "end_text"}')
    connection.send('{"type": "turn_reset", "turn_id": "after-fuzz"}')
    connection.send('{"type": "text_delta", "text": "Still speaking."}')
    connection.send('{"type": "end_text"}')
    samples = 0
    while True:
        data = connection.recv(timeout(20))
        if isinstance(data, bytes):  # a fuzzed turn's audio may still be arriving
            frame = decode_frame(data)
            samples += frame.samples if frame.turn_id == "after-fuzz" else 0
            continue
        event = parse_server_event(data)
        if isinstance(event, TurnDone) and event.turn_id == "after-fuzz":
            assert event.samples == samples > 0
            break
    assert threaded_server.app is not None and len(threaded_server.app.sessions) == 1
