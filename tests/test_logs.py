"""No secret in any log line: every spelling of a token the server accepts, every logger,
at every level (TRACE included), in a test server and in ``voicews serve``'s own output."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus

from bench.hostile import clients as hostile
from conftest import TEST_CONFIG, running, timeout
from voicews.access import AccessPolicy
from voicews.client import RealtimeClient
from voicews.logs import redact

SECRET = "s3cret&tok en"  # an ampersand and a space: the shapes that leaked a tail before
URL_SECRET = "s3cretQueryToken"  # a query token cannot hold & or a space unencoded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        (
            "< GET /v1/realtime?token=SECRET HTTP/1.1",
            "< GET /v1/realtime?token=[redacted] HTTP/1.1",
        ),
        ('"WebSocket /v1/realtime?%74oken=SECRET" [accepted]', '?%74oken=[redacted]"'),
        ("GET /v1/realtime?a=1&t%6Fken=SECRET&b=2", "?a=[redacted]&t%6Fken=[redacted]&b="),
        ("< authorization: Bearer SECRET&more rest", "< authorization: [redacted]"),
        ("< AUTHORIZATION:\tbearer   SECRET", "< AUTHORIZATION:\t[redacted]"),
        ("scope={'query_string': b'%74oken=SECRET', 'x': 1}", "'query_string': b'[redacted]'"),
        ("[(b'authorization', b'Bearer SECRET'), (b'host', b't')]", "b'[redacted]'), (b'host'"),
        ('{"Authorization": "Bearer SECRET", "host": "t"}', '"[redacted]", "host"'),
    ],
)
def test_query_values_and_authorization_values_are_redacted_whole(line: str, kept: str) -> None:
    redacted = redact(line)
    assert "SECRET" not in redacted and "more" not in redacted
    assert kept in redacted


async def offer_every_spelling(url: str, port: int) -> None:
    """The token in every way the server accepts it, plus wrong ones."""
    for query, headers in [
        (f"?token={URL_SECRET}", {}),
        (f"?%74oken={URL_SECRET}", {}),
        (f"?x=1&t%6Fken={URL_SECRET}", {}),
        ("", {"Authorization": f"Bearer {SECRET}"}),
        ("", {"authorization": f"bEaReR   {SECRET}"}),
    ]:
        async with await RealtimeClient.connect(url + query, additional_headers=headers) as c:
            assert c.created.session_id
    with pytest.raises(InvalidStatus):
        await RealtimeClient.connect(f"{url}?token={URL_SECRET}x")
    body = b'{"input": "Hi."}'
    answer = await hostile.raw_request(
        "127.0.0.1",
        port,
        f"POST /v1/audio/speech?token={URL_SECRET} HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: Bearer {SECRET}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body,
        seconds=timeout(30),
    )
    assert answer.startswith(b"HTTP/1.1 200")


async def test_no_logger_logs_a_token_at_any_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(1)  # everything: TRACE, uvicorn's per-message ASGI log, websockets' frames
    policy = AccessPolicy(tokens=frozenset({SECRET, URL_SECRET}))
    async with running(replace(TEST_CONFIG, access=policy)) as srv:
        await offer_every_spelling(srv.url, srv.port)
    text = "\n".join([caplog.text, *(r.getMessage() for r in caplog.records)])
    assert "uvicorn.asgi" in caplog.text  # the TRACE message log was on
    assert "[redacted]" in text
    for secret in (SECRET, URL_SECRET, "tok en", "&tok"):
        assert secret not in text


async def test_serve_at_trace_level_starts_and_prints_no_token(tmp_path: Path) -> None:
    """``--log-level TRACE`` is accepted (it crashed at startup), and nothing the process
    writes, at that level, holds a token."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{SECRET}\n{URL_SECRET}\n")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voicews.cli", "serve", "--port", str(port),
        "--log-level", "TRACE", "--token-file", str(tokens), "--drain-timeout", "2",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        output = b""
        while b"listening on" not in output:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout(30))
            assert line, output.decode()
            output += line
        await offer_every_spelling(f"ws://127.0.0.1:{port}/v1/realtime", port)
        proc.send_signal(signal.SIGTERM)
        output += await asyncio.wait_for(proc.stdout.read(), timeout(30))
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = output.decode()
    assert "level=TRACE" in text and "[redacted]" in text
    for secret in (SECRET, URL_SECRET, "tok en", "&tok"):
        assert secret not in text


def test_log_levels_are_checked_at_the_command_line() -> None:
    from voicews.cli import _log_level

    assert _log_level("trace") == "TRACE" and logging.getLevelName(5) == "TRACE"
    with pytest.raises(Exception, match="choose from TRACE, DEBUG"):
        _log_level("LOUD")
