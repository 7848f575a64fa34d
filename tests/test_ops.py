"""What operators see: health, readiness, Prometheus metrics, and structured log lines."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Iterator

import pytest

from conftest import http_get, running, timeout
from voicews.audio import Audio
from voicews.client import RealtimeClient
from voicews.compute.execution import ComputeWorker
from voicews.engines.base import Engine, SynthesisOptions, WordStarts
from voicews.engines.piper import PiperEngine
from voicews.server import VoicewsServer


def sample(metrics: str, name: str, default: float | None = None) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.M)
    if match is None and default is not None:
        return default
    assert match, f"{name} missing"
    return float(match.group(1))


async def test_health_and_readiness(server: VoicewsServer) -> None:
    assert (await http_get(server.port, "/healthz"))[::2] == (200, b"ok\n")
    assert (await http_get(server.port, "/readyz"))[::2] == (200, b"ready\n")
    assert (await http_get(server.port, "/nope"))[0] == 404


async def test_readiness_fails_while_draining() -> None:
    async with running() as srv:
        assert srv.app is not None
        assert await srv.app.drain(timeout=1.0)  # no sessions: drained at once
        assert (await http_get(srv.port, "/readyz"))[::2] == (503, b"draining\n")
        assert (await http_get(srv.port, "/healthz"))[0] == 200


async def test_readiness_and_metrics_say_when_the_worker_is_overloaded() -> None:
    """So a load balancer routes new conversations elsewhere; this server still admits them."""
    async with running() as srv:
        assert (await http_get(srv.port, "/readyz"))[::2] == (200, b"ready\n")
        for _ in range(3):  # three segments came after their listeners ran dry
            srv.worker.stats.sounded(time.monotonic(), late=True)
        assert (await http_get(srv.port, "/readyz"))[::2] == (503, b"overloaded\n")
        metrics = (await http_get(srv.port, "/metrics"))[2].decode()
        assert sample(metrics, "voicews_overloaded") == 1
        assert sample(metrics, "voicews_worker_late_ratio") == 1
        async with await RealtimeClient.connect(srv.url) as c:
            assert c.created.session_id


async def test_metrics_count_sessions_turns_latency_and_errors(
    server: VoicewsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="voicews")
    before = (await http_get(server.port, "/metrics"))[2].decode()
    async with await RealtimeClient.connect(server.url) as c:
        turn = await c.speak("Counting this turn, please.", tokens_per_s=50, timeout=timeout(20))
        await c.ws.send("{bad json")
        await c.recv(timeout(5))
        status, content_type, body = await http_get(server.port, "/metrics")
    after = body.decode()
    assert status == 200 and content_type.startswith("text/plain")
    assert sample(after, "voicews_sessions_active") >= 1
    for name, grew in [
        ("voicews_sessions_opened_total", 1),
        ('voicews_turns_total{outcome="done"}', 1),
        ("voicews_first_audio_seconds_count", 1),
        ('voicews_errors_total{code="invalid_json"}', 1),
    ]:
        assert sample(after, name) - sample(before, name, default=0.0) >= grew, name
    for name in ("voicews_worker_busy_ratio", "voicews_worker_queue_depth",
                 "voicews_pending_audio_seconds", "voicews_worker_late_ratio"):  # fmt: skip
        assert sample(after, name) >= 0
    assert sample(after, "voicews_overloaded") in (0, 1)
    assert "voicews_stall_seconds_bucket" in after
    # One log line per event, with session and turn ids.
    assert turn.done is not None
    lines = caplog.text.splitlines()
    assert any(f"event=session_open session={c.created.session_id}" in x for x in lines)
    assert any(
        f"event=turn_done session={c.created.session_id} turn={turn.turn_id}" in x for x in lines
    )
    assert any("event=error" in x and "code=invalid_json" in x for x in lines)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/", 200),
        ("/index.html", 200),
        ("/app.js", 200),
        ("/style.css", 200),
        ("/vendor/msgpack.min.js", 200),
        ("/README.md", 404),
        ("/vendor/README.md", 404),
        ("/vendor/msgpack-LICENSE", 404),
        ("/test/wire.test.mjs", 404),
        ("/../README.md", 404),
        ("/vendor/../app.js", 404),
        ("/.hidden.js", 404),
    ],
)
async def test_the_web_root_serves_only_the_clients_files(
    server: VoicewsServer, path: str, status: int
) -> None:
    assert (await http_get(server.port, path))[0] == status


class _SlowToWarm:
    """The real Piper engine with a warm-up that lasts until the test lets it end (MLX on a
    GPU compiles its kernels there: 10-14 s)."""

    def __init__(self, inner: Engine, go: threading.Event) -> None:
        self.inner, self.go = inner, go
        self.name, self.sample_rate = inner.name, inner.sample_rate
        self.device, self.concurrent = inner.device, inner.concurrent

    def warm(self) -> float:
        assert self.go.wait(timeout(30))
        return 1.25

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        return self.inner.synthesize(text, options)


async def test_readiness_says_warming_until_the_engine_is_warm_and_the_log_says_how_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session admitted while the engine warms gets its audio once it is warm."""
    caplog.set_level(logging.INFO, logger="voicews")
    go = threading.Event()
    worker = ComputeWorker(lambda: _SlowToWarm(PiperEngine(), go))
    async with running(worker=worker) as srv:
        assert (await http_get(srv.port, "/readyz"))[::2] == (503, b"warming\n")
        assert (await http_get(srv.port, "/healthz"))[0] == 200
        async with await RealtimeClient.connect(srv.url) as c:
            speaking = asyncio.create_task(c.speak("Hello there.", timeout=timeout(20)))
            await asyncio.sleep(0.2)
            assert not speaking.done()  # its synthesis waits for the warm engine
            go.set()
            turn = await speaking
        assert turn.done is not None and turn.samples > 0
        assert (await http_get(srv.port, "/readyz"))[::2] == (200, b"ready\n")
    lines = caplog.text.splitlines()
    assert any("event=warmed engine=piper seconds=1.25" in line for line in lines)


async def test_the_log_says_which_device_the_engine_computes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voicews")
    async with running() as srv:
        assert srv.worker.device.startswith("cpu (onnxruntime ")
        assert "CPUExecutionProvider" in srv.worker.device
    (line,) = [x for x in caplog.text.splitlines() if "event=listening" in x]
    assert f'device="{srv.worker.device}"' in line
