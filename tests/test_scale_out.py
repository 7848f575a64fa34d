"""Scale-out: Debian's nginx, configured by deploy/nginx/voicews.conf, in front of two instances.

The shipped file is loaded as it is; only its upstream ports and its ``listen`` are changed
to free loopback ports, and it is wrapped in an ``events {}``/``http {}`` of our own whose
pid, logs and temp paths live in a temporary directory. Which instance served a session is
read from each instance's own ``/metrics`` (sessions opened, active and refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from conftest import LISTENING, SERVE, free_port, timeout
from voicews.client import RealtimeClient, SpokenTurn
from voicews.errors import CloseCode
from voicews.protocol import AudioFrame, SegmentStarted

CONF = Path(__file__).parent.parent / "deploy" / "nginx" / "voicews.conf"
UPSTREAM_SERVER = re.compile(r"^(\s*server\s+)127\.0\.0\.1:\d+(\s)", re.MULTILINE)
LISTEN = re.compile(r"^(\s*)listen\s+80;", re.MULTILINE)
SAMPLE_RATE = 22050
SHORT = "Hello there, how are you?"
SPEECH = (
    "Streaming through the proxy. Each chunk should reach the listener as soon as it is "
    "made. Nothing waits for the end of the reply. That is the whole point of it."
)


def nginx_binary() -> str:
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if found is None:
        message = "nginx is not installed (Debian: apt-get install -y nginx)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must install it", pytrace=False)
        pytest.skip(message)
    return found


def render_config(upstreams: list[int], listen: int) -> str:
    """The shipped config with our ports; fails loudly if its shape is not what we expect."""
    text = CONF.read_text()
    ports = iter(upstreams)
    text, servers = UPSTREAM_SERVER.subn(lambda m: f"{m[1]}127.0.0.1:{next(ports)}{m[2]}", text)
    assert servers == len(upstreams), f"{CONF}: expected {len(upstreams)} upstream servers"
    text, listens = LISTEN.subn(lambda m: f"{m[1]}listen 127.0.0.1:{listen};", text)
    assert listens == 1, f"{CONF}: expected one 'listen 80;'"
    return text


def nginx_conf(tmp: Path, include: Path) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must reach the temp paths
    temps = "\n".join(
        f"    {kind}_temp_path {tmp / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}worker_processes 2;
pid {tmp / "nginx.pid"};
error_log {tmp / "error.log"} info;
events {{
    worker_connections 256;
}}
http {{
    access_log {tmp / "access.log"};
{temps}
    include {include};
}}
"""


def request(
    port: int, method: str, path: str, body: bytes | None = None, wait: float = 10.0
) -> tuple[int, dict[str, str], bytes, list[tuple[float, int]]]:
    """One HTTP request; returns status, headers, body, and as it came in: (seconds since the
    request, body bytes so far) for every read."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=wait)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        start = time.perf_counter()
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data, arrivals = bytearray(), []
        while chunk := response.read1(65536):
            data += chunk
            arrivals.append((time.perf_counter() - start, len(data)))
        return response.status, dict(response.getheaders()), bytes(data), arrivals
    finally:
        conn.close()


@dataclass
class Instance:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def metrics(self) -> dict[str, int]:
        if self.process.poll() is not None:
            return {"opened": 0, "active": 0, "refused_503": 0}
        status, _, body, _ = request(self.port, "GET", "/metrics", wait=timeout(5))
        assert status == 200
        text = body.decode()

        def value(pattern: str) -> int:
            found = re.search(rf"^{pattern} (\S+)$", text, re.MULTILINE)
            return int(float(found[1])) if found else 0

        return {
            "opened": value("voicews_sessions_opened_total"),
            "active": value("voicews_sessions_active"),
            "refused_503": value(r'voicews_sessions_refused_total\{reason="503"\}'),
        }

    def readiness(self) -> int:
        return request(self.port, "GET", "/readyz", wait=timeout(5))[0]


@dataclass
class Cluster:
    instances: list[Instance]
    nginx: subprocess.Popen[bytes]
    port: int
    tmp: Path

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    async def metrics(self) -> list[dict[str, int]]:
        """Each instance's counters; an instance that has exited reads as all zero."""
        return [await asyncio.to_thread(i.metrics) for i in self.instances]

    async def connect(self) -> RealtimeClient:
        return await asyncio.wait_for(RealtimeClient.connect(self.url), timeout(10))

    async def where(self, client: RealtimeClient, before: list[dict[str, int]]) -> int:
        """The index of the instance that opened exactly the one session ``client`` holds."""
        after = await self.metrics()
        grew = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if a != b]
        assert len(grew) == 1 and after[grew[0]]["active"] == before[grew[0]]["active"] + 1, (
            before,
            after,
        )
        return grew[0]

    async def settle(self, *which: int) -> list[dict[str, int]]:
        """Wait until these instances (default: all) hold no session, as seen by their metrics
        (a closed session goes a moment after its client); returns the metrics then."""
        deadline = time.monotonic() + timeout(10)
        while True:
            metrics = await self.metrics()
            if not any(metrics[i]["active"] for i in which or range(len(metrics))):
                return metrics
            assert time.monotonic() < deadline, f"sessions still open: {metrics}"
            await asyncio.sleep(0.05)

    @contextlib.contextmanager
    def explained(self) -> Iterator[None]:
        """On failure, print nginx's error log and both instances' logs (pytest shows them)."""
        try:
            yield
        except BaseException:
            print(f"--- nginx error.log ---\n{tail(self.tmp / 'error.log')}")
            for name, instance in zip("ab", self.instances, strict=True):
                print(f"--- instance {name} (port {instance.port}) ---\n{tail(instance.log)}")
            raise


def tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout(15))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout(5))


def start_instance(tmp: Path, name: str) -> Instance:
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*SERVE, "--drain-timeout", "20"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Instance(process, 0, log)


def wait_listening(instance: Instance) -> None:
    deadline = time.monotonic() + timeout(30)
    while (found := LISTENING.search(instance.log.read_text(errors="replace"))) is None:
        assert instance.process.poll() is None, f"voicews exited:\n{tail(instance.log)}"
        assert time.monotonic() < deadline, f"voicews did not start:\n{tail(instance.log)}"
        time.sleep(0.05)
    instance.port = int(found[1])
    assert request(instance.port, "GET", "/healthz", wait=timeout(5))[0] == 200


def start_nginx(tmp: Path, ports: list[int]) -> tuple[subprocess.Popen[bytes], int]:
    binary = nginx_binary()
    for _attempt in range(3):  # a free port can be taken between our probe and nginx's bind
        port = free_port()
        include = tmp / "voicews.conf"
        include.write_text(render_config(ports, port))
        conf = tmp / "nginx.conf"
        conf.write_text(nginx_conf(tmp, include))
        error_log = tmp / "error.log"
        args = [binary, "-p", str(tmp), "-c", str(conf), "-e", str(error_log)]
        checked = subprocess.run(
            [*args, "-t"], capture_output=True, text=True, timeout=timeout(10), check=False
        )
        assert checked.returncode == 0, f"nginx -t failed:\n{checked.stderr}{tail(error_log)}"
        process = subprocess.Popen(
            [*args, "-g", "daemon off;"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout(10)
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if request(port, "GET", "/healthz", wait=timeout(5))[0] == 200:
                    return process, port
            time.sleep(0.05)
        stop(process)
        if "Address already in use" not in tail(error_log):
            break
    raise AssertionError(f"nginx did not come up on port {port}:\n{tail(error_log)}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    nginx_binary()  # skip or fail before starting anything
    tmp = tmp_path_factory.mktemp("scale_out")
    instances: list[Instance] = []
    nginx: subprocess.Popen[bytes] | None = None
    try:
        instances = [start_instance(tmp, name) for name in ("a", "b")]
        for instance in instances:
            wait_listening(instance)
        nginx, port = start_nginx(tmp, [i.port for i in instances])
        yield Cluster(instances, nginx, port, tmp)
    finally:
        if nginx is not None:
            stop(nginx)
        for instance in instances:
            stop(instance.process)


def speech_body(text: str) -> bytes:
    return json.dumps({"input": text, "response_format": "wav"}).encode()


async def close_all(clients: list[RealtimeClient]) -> None:
    for client in clients:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.ws.close(), timeout(5))


def assert_spoken(turn: SpokenTurn, min_seconds: float = 0.8) -> None:
    assert turn.done is not None and not turn.done.cancelled, turn.done
    assert not turn.errors, turn.errors
    assert turn.done.samples == turn.samples
    assert turn.duration > min_seconds


async def test_sessions_spread_over_both_instances(cluster: Cluster) -> None:
    assert all(i.process.poll() is None for i in cluster.instances), "an instance is down"
    start = await cluster.settle()
    clients: list[RealtimeClient] = []
    placed: list[int] = []
    with cluster.explained():
        try:
            for _ in range(4):  # held open together: least_conn puts two on each instance
                before = await cluster.metrics()
                clients.append(await cluster.connect())
                placed.append(await cluster.where(clients[-1], before))
            assert sorted(placed) == [0, 0, 1, 1], placed
            for path, status in (("/readyz", 200), ("/healthz", 200), ("/metrics", 403)):
                got = await asyncio.to_thread(request, cluster.port, "GET", path)
                assert got[0] == status, (path, got[:3])
            turns = await asyncio.gather(*(c.speak(SHORT, timeout=timeout(30)) for c in clients))
            for turn in turns:
                assert_spoken(turn)

            # Free the instance that took the last session: least_conn sends the next one
            # there, where round robin would go to the other.
            emptied = placed[-1]
            for client, at in zip(clients, placed, strict=True):
                if at == emptied:
                    await client.ws.close()
            before = await cluster.settle(emptied)
            clients.append(await cluster.connect())
            assert await cluster.where(clients[-1], before) == emptied
        finally:
            await close_all(clients)
        end = await cluster.metrics()
        assert [e["opened"] - s["opened"] for e, s in zip(end, start, strict=True)] == [
            2 + (emptied == 0),
            2 + (emptied == 1),
        ]


async def test_stopping_an_instance_moves_new_sessions_to_the_other(cluster: Cluster) -> None:
    assert all(i.process.poll() is None for i in cluster.instances), "an instance is down"
    await cluster.settle()
    clients: list[RealtimeClient] = []
    with cluster.explained():
        try:
            await stop_one_under_load(cluster, clients)
        finally:
            await close_all(clients)


async def stop_one_under_load(cluster: Cluster, clients: list[RealtimeClient]) -> None:
    # A long-lived session; its instance is the survivor, the other one will be stopped.
    before = await cluster.metrics()
    keeper = await cluster.connect()
    clients.append(keeper)
    stays = await cluster.where(keeper, before)
    goes = 1 - stays
    stopped = cluster.instances[goes]
    assert_spoken(await keeper.speak(SHORT, timeout=timeout(30)))

    # least_conn sends the next session to the idle instance; a turn is under way there (its
    # text still arriving) when that instance gets SIGTERM.
    before = await cluster.metrics()
    draining = await cluster.connect()
    clients.append(draining)
    assert await cluster.where(draining, before) == goes, "least_conn picked the busy one"
    turn = SpokenTurn("drain", draining.sample_rate)
    await draining.turn_reset(turn.turn_id)
    await draining.text_delta("This turn was under way when its instance was told to stop,")
    while not turn.frames:
        item = await draining.recv(timeout(20))
        if isinstance(item, SegmentStarted):
            turn.segments.append(item)
        elif isinstance(item, AudioFrame):
            turn.frames.append(item)
            turn.pcm += item.pcm
    stopped.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout(10)
    while await asyncio.to_thread(stopped.readiness) != 503:
        assert time.monotonic() < deadline, "the stopped instance never said draining"
        await asyncio.sleep(0.05)

    # While it drains it refuses with 503, and nginx retries on the survivor: sessions and
    # POST /v1/audio/speech alike. With one more session on the survivor, least_conn prefers
    # the draining instance for the POST, so that its retry is certain to be exercised.
    before = await cluster.metrics()
    during_drain = [await cluster.connect()]
    clients += during_drain
    status, _, body, _ = await asyncio.to_thread(
        request, cluster.port, "POST", "/v1/audio/speech", speech_body("Still here.")
    )
    assert status == 200 and body[:4] == b"RIFF", (status, body[:200])
    during_drain += [await cluster.connect() for _ in range(2)]
    clients += during_drain[1:]
    during = await cluster.metrics()
    assert during[goes]["opened"] == before[goes]["opened"], "the draining one took a session"
    assert during[stays]["opened"] == before[stays]["opened"] + 4  # 3 sessions, 1 POST
    assert during[goes]["refused_503"] > before[goes]["refused_503"], (
        "nginx never tried the draining instance, so its failover was not exercised"
    )

    # The turn that was under way finishes whole; then its session is closed, going away.
    await draining.text_delta(" and it still finished.")
    await draining.end_text()
    await asyncio.wait_for(draining.collect(turn), timeout(30))
    assert_spoken(turn)
    spoken_text = " ".join(s.text for s in turn.segments)
    assert spoken_text.startswith("This turn") and spoken_text.endswith("finished."), spoken_text
    with pytest.raises(ConnectionClosed):
        await draining.recv(timeout(10))
    assert draining.ws.close_code == CloseCode.GOING_AWAY, draining.ws.close_code
    await asyncio.wait_for(asyncio.to_thread(stopped.process.wait), timeout(20))
    assert stopped.process.returncode == 0, tail(stopped.log)

    # It is gone: every new session succeeds and lands on the survivor, and the sessions
    # opened while it drained speak too.
    before = await cluster.metrics()
    after_exit = [await cluster.connect() for _ in range(3)]
    clients += after_exit
    turns = await asyncio.gather(
        *(c.speak(SHORT, timeout=timeout(30)) for c in during_drain + after_exit)
    )
    for spoken in turns:
        assert_spoken(spoken)
    after = await cluster.metrics()
    assert after[stays]["opened"] == before[stays]["opened"] + len(after_exit)

    # The long-lived session on the survivor never noticed.
    assert_spoken(await keeper.speak("Are you still with me?", timeout=timeout(30)))

    # HTTP speech still streams a WAV through nginx: the first half second of audio comes long
    # before the end.
    status, headers, body, arrivals = await asyncio.to_thread(
        request, cluster.port, "POST", "/v1/audio/speech", speech_body(SPEECH), timeout(30)
    )
    assert status == 200, (status, body[:200])
    assert headers.get("Content-Type") == "audio/wav"
    assert body[:4] == b"RIFF" and body[8:12] == b"WAVE"
    assert (len(body) - 44) / 2 / SAMPLE_RATE > 4.0  # seconds of audio
    half_second = next(t for t, size in arrivals if size >= 44 + SAMPLE_RATE)
    assert half_second < arrivals[-1][0] / 2, arrivals
