"""The ASGI application: routes each request to its dialect, through admission.

``/v1/realtime`` is the WebSocket session; ``POST /v1/audio/speech`` streams speech over
HTTP; ``/healthz``, ``/readyz`` and ``/metrics`` are for operators; everything else under
``/`` is the bundled web client.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST

from . import access, logs
from .admission import Admission
from .agent.server import AgentBackend
from .asgi import Receive, Scope, Send, headers_of, refuse, refuse_websocket, respond
from .compute.jobs import Account
from .compute.worker import Worker
from .core.config import SessionConfig
from .dialects import elevenlabs
from .dialects.realtime import Closed, RealtimeConnection
from .dialects.speech import MAX_BODY, read_body, speech
from .driver import Generate, SessionDriver
from .encoding import OutputFormat
from .errors import ErrorCode, VoicewsError
from .protocol import REALTIME_PATH, parse_audio_query

SPEECH_PATH = "/v1/audio/speech"
_PREFLIGHT = [
    (b"access-control-allow-methods", b"POST"),
    (b"access-control-allow-headers", b"authorization, content-type"),
    (b"access-control-max-age", b"600"),
]
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


@dataclass(frozen=True, slots=True)
class AppConfig:
    """What the app needs of the server's configuration (``ServerConfig`` holds the defaults)."""

    session: SessionConfig
    access: access.AccessPolicy
    max_sessions: int
    request_timeout: float
    """Seconds a speech request's body may take to arrive (its head has the same bound, kept
    by the transport); the body is read before the request counts as a session."""


class VoicewsApp:
    def __init__(
        self, config: AppConfig, worker: Worker, agent: AgentBackend | None = None
    ) -> None:
        self.config = config
        self.worker = worker
        self.agent = agent
        self.admission = Admission(config.access, config.max_sessions, worker)
        self.sessions = self.admission.sessions
        self.metrics = self.admission.metrics
        self.one_shot = Account()
        """Speech requests share one account with the worker: together they get the share of
        one conversation when the worker is contended (no listener of theirs runs dry), and
        whatever the conversations leave."""
        self._web = _web_root()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def drain(self, timeout: float) -> bool:
        """Refuse new sessions, let live turns finish; True if all ended within ``timeout``."""
        return await self.admission.drain(timeout)

    def _admit(self, scope: Scope) -> None:
        self.admission.admit(
            headers_of(scope), scope["query_string"], scope["path"], _client(scope)
        )

    def _generator(self) -> Generate | None:
        """Agent mode: a new session's generation work (it keeps the session's prompt cache)."""
        return self.agent.generator() if self.agent is not None else None

    # --- WebSocket ------------------------------------------------------------------------

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # websocket.connect
        try:
            eleven = elevenlabs.parse_request(scope["path"], scope["query_string"])
        except VoicewsError as refusal:
            await refuse_websocket(send, refusal)
            return
        if eleven is not None:
            await self._elevenlabs(scope, receive, send, eleven)
            return
        try:
            if scope["path"] != REALTIME_PATH:
                raise VoicewsError(
                    ErrorCode.NOT_FOUND, f"not found; the realtime endpoint is {REALTIME_PATH}"
                )
            self._admit(scope)
            audio = self._audio_query(scope["query_string"])
        except VoicewsError as refusal:
            await refuse_websocket(send, refusal)
            return
        await send({"type": "websocket.accept"})
        session = self.admission.open_session(self.config.session, audio)
        connection = RealtimeConnection(
            SessionDriver(session, self.worker, self.metrics.observe, self._generator()),
            receive,
            send,
            self.config.max_sessions,
        )
        self.admission.connections[session.id] = connection
        if self.admission.draining:
            connection.drain()
        logs.event("session_open", session=session.id, client=_client(scope))
        closed = Closed(code=None, lost=False)
        try:
            closed = await connection.run()
        finally:
            self.admission.close_session(session)
            if closed.lost:
                self.metrics.sessions_lost.inc()
            logs.event("session_close", session=session.id, code=closed.code, lost=closed.lost)

    async def _elevenlabs(
        self, scope: Scope, receive: Receive, send: Send, request: elevenlabs.Request
    ) -> None:
        """An ElevenLabs client: its ``xi-api-key`` is the bearer token; where the handshake
        offers none, the first message's ``xi_api_key`` must."""
        headers = elevenlabs.credential(headers_of(scope))
        query = scope["query_string"]
        later = bool(self.config.access.tokens) and not access.offers_token(headers, query)
        try:
            self.admission.admit(headers, query, scope["path"], _client(scope), later)
        except VoicewsError as refusal:
            await refuse_websocket(send, refusal)
            return
        await send({"type": "websocket.accept"})
        session = self.admission.open_session(self.config.session, request.audio.session)
        connection = elevenlabs.ElevenLabsConnection(
            SessionDriver(session, self.worker, self.metrics.observe),
            receive,
            send,
            request,
            self.config.access if later else None,
        )
        self.admission.connections[session.id] = connection
        if self.admission.draining:
            connection.drain()
        logs.event("session_open", session=session.id, client=_client(scope), protocol="elevenlabs")
        try:
            await connection.run()
        finally:
            self.admission.close_session(session)
            logs.event("session_close", session=session.id, protocol="elevenlabs")

    def _audio_query(self, query: bytes) -> OutputFormat:
        """The output format asked for in the realtime URL; VoicewsError for a bad one."""
        update = parse_audio_query(query)
        return OutputFormat(self.worker.sample_rate).updated(update.sample_rate, update.format)

    # --- HTTP -----------------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/healthz":
            await respond(send, 200, "ok\n")
        elif path == "/readyz":
            state = self.admission.readiness()
            await respond(send, 200 if state == "ready" else 503, state + "\n")
        elif path == "/metrics":
            await respond(send, 200, self.metrics.exposition(), CONTENT_TYPE_LATEST)
        elif path == SPEECH_PATH:
            await self._speech(scope, receive, send, method)
        elif method in ("GET", "HEAD") and (asset := self._asset(path)) is not None:
            suffix = "." + asset.name.rpartition(".")[2]
            content_type = _CONTENT_TYPES.get(suffix, "application/octet-stream")
            await respond(send, 200, asset.read_bytes(), content_type)
        else:
            await respond(send, 404, "not found\n")

    async def _speech(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        cors = self._cors(headers_of(scope).get("origin"))
        if method == "OPTIONS":  # a browser's preflight for a cross-origin POST
            await respond(send, 204, b"", headers=[*cors, *_PREFLIGHT])
            return
        try:  # every refusal of the endpoint, before its response starts
            if method != "POST":
                raise VoicewsError(ErrorCode.METHOD_NOT_ALLOWED, "use POST")
            self._admit(scope)
            # Read the body before the request holds a slot: a slow body waits outside.
            body = await self._read_body(receive)
            self._admit(scope)
            # One request is one whole turn: its text may all wait in the backlog at once.
            config = self.config.session
            session = self.admission.open_session(
                replace(config, max_pending_text_chars=config.max_turn_text_chars)
            )
            self.metrics.http_speech.inc()
            try:
                driver = SessionDriver(
                    session, self.worker, self.metrics.observe, account=self.one_shot
                )
                await speech(driver, body, receive, send, cors)
            finally:
                self.admission.close_session(session)
        except VoicewsError as refusal:
            await refuse(send, refusal, cors)

    async def _read_body(self, receive: Receive) -> bytes:
        """The speech request's body, within ``request_timeout``. Too slow or too large is
        refused, and the connection closes: the rest of the body is never read."""
        seconds = self.config.request_timeout
        try:
            async with asyncio.timeout(seconds):
                body = await read_body(receive, MAX_BODY)
        except TimeoutError:
            self.metrics.errors.labels(ErrorCode.REQUEST_TIMEOUT).inc()
            message = f"request body not received within {seconds:g} s"
            raise VoicewsError(ErrorCode.REQUEST_TIMEOUT, message) from None
        if body is None:
            raise VoicewsError(ErrorCode.REQUEST_TOO_LARGE, f"body over {MAX_BODY} bytes")
        return body

    def _cors(self, origin: str | None) -> list[tuple[bytes, bytes]]:
        """CORS headers for the speech endpoint: for an origin admission would let in (any
        well-formed one, or those on the allow-list), never one it refuses."""
        if origin is None or not access.origin_allowed(self.config.access, origin):
            return []
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (
                b"access-control-expose-headers",
                b"x-request-id, x-voicews-streamed, x-voicews-sample-rate",
            ),
            (b"vary", b"origin"),
        ]

    def _asset(self, path: str) -> Path | None:
        """One of the web client's own files (``WEB_FILES``), nothing else in its folder."""
        parts = (path.strip("/") or "index.html").split("/")
        if self._web is None or not any(_matches(parts, pattern) for pattern in WEB_FILES):
            return None
        node = self._web.joinpath(*parts)
        return node if node.is_file() else None


WEB_FILES = ("*.html", "*.js", "*.css", "vendor/*.js")
"""What the web root serves: the page, its scripts and styles; not its README, tests or
licences. Each ``*`` stands for part of one path segment."""


def _matches(parts: list[str], pattern: str) -> bool:
    wanted = pattern.split("/")
    return len(parts) == len(wanted) and all(
        not part.startswith(".") and "\\" not in part and fnmatchcase(part, want)
        for part, want in zip(parts, wanted, strict=True)
    )


def _web_root() -> Path | None:
    """The bundled web client: ``voicews/web`` when installed, ``clients/web`` in a checkout."""
    package = Path(__file__).parent
    for candidate in (package / "web", package.parent / "clients" / "web"):
        if candidate.is_dir():
            return candidate
    return None


def _client(scope: Scope) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None
