"""Fairness per account: a calm session speaking beside an attack keeps its first audio and
does not stall (issue 10 point 4: a barge-in storm; issue 15 point 4: a flood of speech
requests). A real server on loopback with the real voice; the attacks and the calm session
are ``bench/hostile/clients.py``'s (as in ``test_attacks.py`` and ``python -m bench
attacks``), each attack scaled to last about as long as the calm turn. The calm session's
figures are printed.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from bench.hostile import clients as hostile
from bench.hostile.clients import Calm, alongside
from conftest import TEST_CONFIG, running, timeout

MAX_FIRST_AUDIO = 1.0
MAX_STALL = 0.3
"""Loose enough for a busy 2-core machine; the worker before (strict priority, a turn's first
segment before any later one) stalled the calm turn 9.1 s beside the storm and 2.4 s beside
the speech requests, in one run here."""

STORM_SECONDS = 10.0
"""At 60 turns a second each (over WebSocket reset, a sentence, end: 180 messages/s, under the
rate limit; over Wyoming a synthesize), until about when the calm turn (about 9 s of speech,
from 0.5 s in) is done."""
SPEECH_REQUESTS = 16
"""Each the calm reply, about 9 s of speech, read as fast as it comes."""


def check(calm: Calm, attack: str) -> None:
    print(f"{attack}: calm session {calm}")
    assert calm.first_audio <= timeout(MAX_FIRST_AUDIO), attack
    assert calm.stall <= timeout(MAX_STALL), attack


async def test_barge_in_storms_get_no_more_compute_than_a_listener() -> None:
    """Issue 10 point 4: a WebSocket session and two Wyoming connections, each its own
    account, starting 60 turns a second, each cut by the next. (Wyoming connections charged
    to no account stalled the calm turn 455-602 ms here, against 54-118 ms.)"""
    async with running(replace(TEST_CONFIG, wyoming_uri="tcp://127.0.0.1:0")) as srv:
        assert srv.wyoming is not None
        storms = asyncio.gather(
            hostile.barge_in_storm(srv.url, STORM_SECONDS),
            hostile.wyoming_storm("127.0.0.1", srv.wyoming.port, STORM_SECONDS),
            hostile.wyoming_storm("127.0.0.1", srv.wyoming.port, STORM_SECONDS),
        )
        calm, (websocket, wyoming, _) = await alongside(srv.url, storms)
    check(calm, f"barge-in storms ({websocket} turns over WebSocket, {wyoming} over Wyoming)")


async def test_speech_requests_share_the_worker_with_conversations() -> None:
    """Issue 15 point 4: concurrent speech requests (OpenAI's default format, mp3), each
    wanting all its audio at once; every one is answered."""
    async with running() as srv:
        flood = hostile.http_speech_load("127.0.0.1", srv.port, SPEECH_REQUESTS)
        calm, statuses = await alongside(srv.url, flood)
    check(calm, f"{SPEECH_REQUESTS} speech requests")
    assert statuses == [200] * SPEECH_REQUESTS
