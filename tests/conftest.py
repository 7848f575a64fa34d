"""Fixtures: a real voicews server on a free loopback port, speaking with the bundled voice."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest

from voicews.client import RealtimeClient
from voicews.engines.base import Engine, SynthesisOptions
from voicews.server import ServerConfig, VoicewsServer
from voicews.session import SessionConfig

# Slow machines: VOICEWS_TIMEOUT_SCALE=3 triples every wait in the suite.
TIMEOUT_SCALE = float(os.environ.get("VOICEWS_TIMEOUT_SCALE", "1"))


def timeout(seconds: float) -> float:
    return seconds * TIMEOUT_SCALE


# Small socket buffers so a slow reader's backlog reaches the session queue within seconds.
TEST_CONFIG = ServerConfig(
    port=0,
    socket_send_buffer=32 * 1024,
    session=replace(SessionConfig(), max_pending_text_chars=2_000, max_turn_text_chars=8_000),
)


async def http_get(port: int, path: str) -> tuple[int, str, bytes]:
    """A plain GET on loopback: status, content type, body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), timeout(5))
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    content_type = re.search(rb"(?i)content-type: ([^\r]+)", head)
    return int(head.split()[1]), content_type.group(1).decode() if content_type else "", body


@asynccontextmanager
async def running(config: ServerConfig = TEST_CONFIG, **kw: object) -> AsyncIterator[VoicewsServer]:
    """A server of its own, for tests that need other limits (or another engine)."""
    srv = VoicewsServer(config, **kw)  # type: ignore[arg-type]
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


def with_session(**changes: object) -> ServerConfig:
    return replace(TEST_CONFIG, session=replace(TEST_CONFIG.session, **changes))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
async def server() -> AsyncIterator[VoicewsServer]:
    async with running() as srv:
        yield srv


@pytest.fixture
async def client(server: VoicewsServer) -> AsyncIterator[RealtimeClient]:
    async with await RealtimeClient.connect(server.url) as c:
        yield c


class FailsOnMarker:
    """The real Piper engine with one injected fault (text containing "explode" raises):
    the only way to make synthesis fail on demand."""

    name = "piper-faulty"

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[npt.NDArray[np.float32]]:
        if "explode" in text:
            raise RuntimeError("injected engine fault")
        return self.inner.synthesize(text, options)
