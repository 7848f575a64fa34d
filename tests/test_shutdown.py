"""SIGTERM on a real ``voicews serve`` process: refuse new sessions, finish live turns, close."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from bench.hostile import clients as hostile
from conftest import free_port, timeout
from voicews.client import RealtimeClient, SpokenTurn, word_pieces
from voicews.errors import CloseCode

REPLY = "Sure, here is the plan. First we pack the bags, then we drive to the coast for lunch."


async def test_sigterm_drains_live_turns_then_closes_going_away() -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voicews.cli", "serve", "--port", str(port),
        "--drain-timeout", "20",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout(30))
        assert b"listening on" in line
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        async with await RealtimeClient.connect(url) as client:
            turn = SpokenTurn("live", client.sample_rate)
            await client.turn_reset("live")
            pieces = word_pieces(REPLY)
            for piece in pieces[:6]:
                await client.text_delta(piece)
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            # New sessions are refused while the live turn goes on...
            with pytest.raises((InvalidStatus, OSError)) as refused:
                await RealtimeClient.connect(url)
            if isinstance(refused.value, InvalidStatus):
                assert refused.value.response.status_code == 503
            for piece in pieces[6:]:
                await client.text_delta(piece)
                await asyncio.sleep(0.02)
            await client.end_text()
            await asyncio.wait_for(client.collect(turn), timeout(30))
            assert turn.done is not None and not turn.done.cancelled
            assert turn.samples == turn.done.samples > 22050
            # ...and once it is done the server closes with "going away".
            with pytest.raises(ConnectionClosed) as closed:
                await client.recv(timeout(10))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == CloseCode.GOING_AWAY
        assert await asyncio.wait_for(proc.wait(), timeout(20)) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_sessions_whose_peer_is_gone_do_not_hold_shutdown() -> None:
    """Peers that flooded without reading and then reset: their sessions are over, so SIGTERM
    does not wait the drain timeout for them (it waited all of it, 37 s, when they leaked)."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voicews.cli", "serve", "--port", str(port),
        "--drain-timeout", "20",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout(30))
        assert b"listening on" in line
        await asyncio.gather(
            *(hostile.flood_then_reset("127.0.0.1", port, 30_000, seconds=3) for _ in range(3))
        )
        await asyncio.sleep(0.5)
        stopping = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout(15)) == 0
        print(f"SIGTERM with 3 reset peers: exited after {time.monotonic() - stopping:.1f} s")
        assert time.monotonic() - stopping < timeout(8)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
