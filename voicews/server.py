"""WebSocket I/O around the sans-I/O session: moves messages, runs nothing heavy.

Each connection has a receive loop (client frames -> session), a send loop (session outbox ->
socket, awaiting the socket's drain, which is what makes a slow reader pause its own
synthesis), and a timer for the session's idle-flush and stall-guard deadlines. Synthesis
results come back from the compute worker thread through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from .engines import engine_factory
from .errors import ErrorCode, VoicewsError
from .protocol import (
    REALTIME_PATH,
    AudioFrame,
    encode_event,
    encode_frame,
    parse_client_message,
)
from .session import Session, SessionConfig
from .worker import ComputeWorker, Job, JobAudio, JobDone, JobEvent, JobFailed

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    engine: str = "piper"
    voice: str | None = None
    socket_send_buffer: int = 128 * 1024
    """Kernel send buffer per socket. Small, so a slow reader's backlog stays in our bounded
    queue (where barge-in can drop it) rather than in seconds of unretractable kernel buffer."""
    session: SessionConfig = field(default_factory=SessionConfig)


class VoicewsServer:
    """The service: one compute worker, any number of WebSocket sessions."""

    def __init__(self, config: ServerConfig, worker: ComputeWorker | None = None) -> None:
        self.config = config
        self.worker = worker or ComputeWorker(engine_factory(config.engine, config.voice))
        self.sessions: dict[str, Session] = {}
        self._server: Server | None = None

    async def start(self) -> None:
        await asyncio.to_thread(self.worker.start)
        self._server = await serve(
            self._handle,
            self.config.host,
            self.config.port,
            process_request=self._route,
            # Frames past our own limit get a typed error; only absurd ones close the socket.
            max_size=max(4 * self.config.session.max_message_bytes, 1 << 20),
        )
        log.info(
            "voicews listening on ws://%s:%d%s (engine %s, %d Hz)",
            self.config.host,
            self.port,
            REALTIME_PATH,
            self.worker.engine_name,
            self.worker.sample_rate,
        )

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = next(iter(self._server.sockets)).getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"ws://{self.config.host}:{self.port}{REALTIME_PATH}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await asyncio.to_thread(self.worker.stop)

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.wait_closed()

    def _route(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == "/healthz":
            return connection.respond(HTTPStatus.OK, "ok\n")
        if path != REALTIME_PATH:
            return connection.respond(
                HTTPStatus.NOT_FOUND, f"not found; the realtime endpoint is {REALTIME_PATH}\n"
            )
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        sock = ws.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_send_buffer)
        session = Session(uuid.uuid4().hex, self.worker.sample_rate, self.config.session)
        self.sessions[session.id] = session
        log.info("session %s opened from %s", session.id, ws.remote_address)
        try:
            await _Connection(ws, session, self.worker).run()
        finally:
            del self.sessions[session.id]
            log.info("session %s closed (code %s)", session.id, ws.close_code)


class _Connection:
    def __init__(self, ws: ServerConnection, session: Session, worker: ComputeWorker) -> None:
        self._ws = ws
        self._session = session
        self._worker = worker
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._jobs: dict[int, Job] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        limit = self._session.config.max_message_bytes
        try:
            await self._ws.send(encode_event(self._session.created()))
            sender = asyncio.create_task(self._send_loop())
            try:
                async for data in self._ws:
                    self._receive(data, limit)
            finally:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await sender
        except ConnectionClosed:
            pass
        finally:
            self._session.close()
            self._sync()
            if self._timer is not None:
                self._timer.cancel()

    def _receive(self, data: str | bytes, limit: int) -> None:
        session = self._session
        size = len(data) if isinstance(data, bytes) else len(data.encode())
        try:
            if size > limit:
                raise VoicewsError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"message of {size} bytes refused; the limit is {limit} bytes",
                )
            session.handle(parse_client_message(data), self._loop.time())
        except VoicewsError as exc:
            session.report(exc)
        except Exception:
            log.exception("session %s: unexpected error handling a message", session.id)
            session.report(VoicewsError(ErrorCode.INTERNAL_ERROR, "internal error"))
        self._sync()

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            item = self._session.pop(self._loop.time())
            if item is None:
                self._wake.clear()
                continue
            if isinstance(item, AudioFrame):
                await self._ws.send(encode_frame(item))
            else:
                await self._ws.send(encode_event(item))
            self._sync()

    def _sync(self) -> None:
        """Carry the session's requests out: jobs to the worker, wake the sender, set timer."""
        session = self._session
        for request in session.take_submissions():
            job = Job(
                text=request.text,
                options=request.options,
                first=request.first,
                deadline=request.deadline,
                on_event=partial(self._from_worker, request.job_id),
            )
            self._jobs[request.job_id] = job
            self._worker.submit(job)
        for job_id in session.take_cancellations():
            cancelled = self._jobs.pop(job_id, None)
            if cancelled is not None:
                self._worker.cancel(cancelled)
        if session.outbox:
            self._wake.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wake_at = session.wakeup_at(self._loop.time())
        if wake_at is not None:
            self._timer = self._loop.call_at(wake_at, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._session.tick(self._loop.time())
        self._sync()

    def _from_worker(self, job_id: int, event: JobEvent) -> None:
        """Runs on the compute thread: hand the event to the event loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self._loop.call_soon_threadsafe(self._on_job_event, job_id, event)

    def _on_job_event(self, job_id: int, event: JobEvent) -> None:
        session, now = self._session, self._loop.time()
        match event:
            case JobAudio(audio=audio):
                session.on_audio(job_id, audio, now)
            case JobDone():
                self._jobs.pop(job_id, None)
                session.on_done(job_id, now)
            case JobFailed(message=message):
                self._jobs.pop(job_id, None)
                session.on_failed(job_id, message, now)
        self._sync()
