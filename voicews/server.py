"""Runs the app: the compute worker plus uvicorn in this process, and graceful shutdown.

uvicorn moves the bytes (HTTP/1.1 through h11, WebSocket through the sans-I/O protocol of
``websockets``, both with the bounds of :mod:`voicews.transport`); the app decides. Shutdown
drains first: new sessions are refused, live turns finish up to ``drain_timeout``, sessions
close (going away), then uvicorn stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import uvicorn

from . import heap, logs
from .access import AccessPolicy, own_origins
from .agent.server import AgentBackend
from .app import AppConfig, VoicewsApp
from .compute.execution import ComputeWorker
from .compute.worker import Worker
from .core.config import SessionConfig
from .core.conversation import AgentConfig
from .core.cost import FIRST_WORDS
from .engines import engine_factory, engine_voices
from .protocol import REALTIME_PATH
from .transport import (
    TransportLimits,
    TransportPolicy,
    http_protocol,
    listening_socket,
    websocket_protocol,
)

if TYPE_CHECKING:
    from .dialects.wyoming import WyomingServer


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    engine: str = "piper"
    voice: str | None = None
    lanes: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    """Inferences run side by side by an engine that can (``piper``, ``kokoro``); one in agent
    mode, whose language model is bound to one thread. One per core by default: on a CPU,
    inferences side by side do more than one spread over all the cores, and one that runs
    alone still gets them all."""
    phrase_cache_seconds: float = 120.0
    """Seconds of audio of turns' first segments kept to give again at once (a reply's
    openers: ``compute/phrases.py``); 0: none."""
    socket_send_buffer: int = 128 * 1024
    """Kernel send buffer per socket. Small, so a slow reader's backlog stays in our bounded
    queue (where barge-in can drop it) rather than in seconds of unretractable kernel buffer."""
    ping_interval: float = 20.0
    """Seconds between keepalive pings; a peer that does not answer within ``ping_timeout``
    is dropped, and so is one that leaves what we owe it (past 64 KiB) unread that long."""
    ping_timeout: float = 20.0
    drain_timeout: float = 30.0
    """On shutdown, how long live turns may take to finish."""
    max_sessions: int = 64
    """Concurrent sessions, speech requests included; more are refused (HTTP 503). Each
    session is told it in ``session_created.limits``."""
    handshake_timeout: float = 5.0
    """Seconds a request head (a WebSocket handshake too) may take to arrive, from the
    connection's first byte: silent and trickling connections are closed (408)."""
    request_timeout: float = 10.0
    """Seconds a speech request's body may take to arrive once its head has (then 408), and a
    Wyoming event once its first byte has."""
    max_connections: int | None = None
    """Open connections at once, HTTP, WebSocket and Wyoming together; None: four per session
    slot. Past it a new connection evicts the one waiting longest for its request head (503);
    if none is waiting, the new one gets 503 and is closed."""
    max_waiting_per_address: int = 16
    """Connections from one client address still waiting for their request head after a
    second (``transport.HOLDING``); one more evicts that address's longest waiting (503). A
    client's own handshake takes milliseconds, so this binds only connections that hold on
    without finishing theirs, not a burst of sessions opened at once."""
    session: SessionConfig = field(default_factory=SessionConfig)
    access: AccessPolicy = field(default_factory=AccessPolicy)
    agent_model: str | None = None
    """Agent mode: an mlx-lm model directory, repo id or ``.gguf`` that writes the replies to
    ``user_message``; it shares the compute worker (and the GPU) with speech."""
    wyoming_uri: str | None = None
    """``tcp://HOST:PORT``: also serve Wyoming (Home Assistant) text to speech there, through
    the same sessions and worker (``voicews.dialects.wyoming``; needs the ``wyoming`` package)."""


def realtime_url(host: str, port: int) -> str:
    """The realtime endpoint's URL on ``host:port`` (an IPv6 host in brackets)."""
    host = f"[{host}]" if ":" in host else host
    return f"ws://{host}:{port}{REALTIME_PATH}"


def log_warmed(worker: Worker) -> None:
    """Log once the engine is warm (``/readyz`` said ``warming`` until then); blocks."""
    worker.warmed.wait()
    logs.event("warmed", engine=worker.engine_name, seconds=f"{worker.warm_seconds:.2f}")


class _Embedded(uvicorn.Server):
    """uvicorn without its own signal handlers: the service decides how to shut down."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class VoicewsServer:
    def __init__(
        self,
        config: ServerConfig,
        worker: Worker | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        """``worker``: the compute worker to serve from (by default one of this process's,
        built from ``config``); ``sock``: a listening socket to accept on (a front process's,
        shared with the others), instead of one bound to ``config``'s address."""
        self.config = config
        lanes = 1 if config.agent_model is not None else config.lanes
        self.worker: Worker = worker or ComputeWorker(
            engine_factory(config.engine, config.voice),
            lanes,
            phrase_seconds=config.phrase_cache_seconds,
        )
        self.app: VoicewsApp | None = None
        self.policy: TransportPolicy | None = None
        self.wyoming: WyomingServer | None = None
        self._uvicorn: _Embedded | None = None
        self._task: asyncio.Task[None] | None = None
        self._warming: asyncio.Task[None] | None = None
        self._socket = sock

    async def start(self) -> None:
        logs.redact_secrets()
        heap.map_large_buffers()
        await asyncio.to_thread(self.worker.start)
        voices = engine_voices(self.config.engine, self.config.voice)
        session = replace(self.config.session, voices=voices)
        if session.segmenter.first_words is None:
            words = FIRST_WORDS.get(self.config.engine)
            session = replace(session, segmenter=replace(session.segmenter, first_words=words))
        agent = None
        if self.config.agent_model is not None:
            if not isinstance(self.worker, ComputeWorker):
                raise ValueError("agent mode runs its model on this process's compute worker")
            agent = AgentBackend(self.config.agent_model)
            await asyncio.to_thread(agent.preload, self.worker)
            session = replace(session, agent=session.agent or AgentConfig())
        if self._socket is None:
            self._socket = self._listen()
        access = replace(self.config.access, own_origins=own_origins(self.config.host, self.port))
        app = self.app = VoicewsApp(
            AppConfig(
                session=session,
                access=access,
                max_sessions=self.config.max_sessions,
                request_timeout=self.config.request_timeout,
            ),
            self.worker,
            agent,
        )
        connections = self.config.max_connections
        limits = TransportLimits(
            head_timeout=self.config.request_timeout,
            max_connections=4 * self.config.max_sessions if connections is None else connections,
            write_timeout=self.config.ping_interval + self.config.ping_timeout,
            handshake_timeout=self.config.handshake_timeout,
            max_waiting_per_address=self.config.max_waiting_per_address,
            unread_timeout=self.config.ping_timeout,
        )

        def dropped(reason: str) -> None:
            app.metrics.connections_dropped.labels(reason).inc()

        policy = self.policy = TransportPolicy(limits, dropped, self.open_connections)
        if self.config.wyoming_uri is not None:
            from .dialects.wyoming import WyomingServer

            self.wyoming = WyomingServer(
                app.admission,
                session,
                self.config.wyoming_uri,
                policy,
                self.config.voice,
                self.config.socket_send_buffer,
            )
            await self.wyoming.start()
        config = uvicorn.Config(
            app,
            http=http_protocol(policy),
            ws=websocket_protocol(policy),
            lifespan="off",
            # Frames past our own limit get a typed error; only absurd ones close the socket.
            ws_max_size=max(4 * self.config.session.max_message_bytes, 1 << 20),
            ws_ping_interval=self.config.ping_interval,
            ws_ping_timeout=self.config.ping_timeout,
            ws_per_message_deflate=False,  # PCM does not compress; deflate only adds latency
            log_config=None,
            access_log=False,  # our own structured log lines
            timeout_graceful_shutdown=5,
        )
        self._uvicorn = _Embedded(config)
        app.metrics.track_connections(self.open_connections)
        self._task = asyncio.create_task(self._uvicorn.serve(sockets=[self._socket]))
        while not self._uvicorn.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        logs.event(
            "listening",
            url=self.url,
            engine=self.worker.engine_name,
            voice=voices[0],
            sample_rate=self.worker.sample_rate,
            device=self.worker.device,
        )
        self._warming = asyncio.create_task(self._log_warmed())

    async def _log_warmed(self) -> None:
        await asyncio.to_thread(log_warmed, self.worker)

    @property
    def connections(self) -> set[Any]:
        """The open HTTP and WebSocket connections (uvicorn's protocol objects, each with its
        ``transport``)."""
        assert self._uvicorn is not None
        connections: set[Any] = self._uvicorn.server_state.connections
        return connections

    def open_connections(self) -> int:
        """HTTP, WebSocket and Wyoming: what the connection cap counts."""
        web = len(self.connections) if self._uvicorn is not None else 0
        return web + (self.wyoming.open_connections if self.wyoming is not None else 0)

    def _listen(self) -> socket.socket:
        config = self.config
        sock = listening_socket(config.host, config.port, config.socket_send_buffer)
        sock.listen(1024)
        sock.setblocking(False)
        return sock

    @property
    def port(self) -> int:
        assert self._socket is not None
        port: int = self._socket.getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return realtime_url(self.config.host, self.port)

    @property
    def http_url(self) -> str:
        return self.url.replace("ws://", "http://", 1).removesuffix(REALTIME_PATH)

    async def close(self, drain: bool = False) -> None:
        """Stop; with ``drain``, let live turns finish first (up to ``drain_timeout``)."""
        if self.app is not None and drain:
            logs.event("draining", sessions=len(self.app.sessions))
            finished = await self.app.drain(self.config.drain_timeout)
            logs.event("drained", all_finished=finished)
        if self._warming is not None:
            self._warming.cancel()
        if self.wyoming is not None:
            await self.wyoming.close()
        if self._uvicorn is not None and self._task is not None:
            self._uvicorn.should_exit = True
            await self._task
        await asyncio.to_thread(self.worker.stop)
