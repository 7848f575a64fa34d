"""The ASGI application: routes, admission (auth, origin, capacity, draining), and state.

``/v1/realtime`` is the WebSocket session; ``POST /v1/audio/speech`` streams speech over
HTTP; ``/healthz``, ``/readyz`` and ``/metrics`` are for operators; everything else under
``/`` is the bundled web client.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST

from . import access, logs
from .agent import AgentBackend
from .asgi import Receive, Scope, Send, headers_of, refuse_websocket, respond
from .driver import SessionDriver
from .encoding import OutputFormat
from .errors import VoicewsError
from .metrics import Metrics
from .protocol import REALTIME_PATH, parse_audio_query
from .realtime import RealtimeConnection
from .session import Session, SessionConfig
from .speech import refuse, speech
from .worker import ComputeWorker

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
    session: SessionConfig = field(default_factory=SessionConfig)
    access: access.AccessPolicy = field(default_factory=access.AccessPolicy)
    voice_name: str = "en_US-joe-medium"


class VoicewsApp:
    def __init__(
        self, config: AppConfig, worker: ComputeWorker, agent: AgentBackend | None = None
    ) -> None:
        self.config = config
        self.worker = worker
        self.agent = agent
        self.sessions: dict[str, Session] = {}
        self.connections: dict[str, RealtimeConnection] = {}
        self.metrics = Metrics(worker, self.sessions)
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._web = _web_root()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def drain(self, timeout: float) -> bool:
        """Refuse new sessions, let live turns finish; True if all ended within ``timeout``."""
        self.draining = True
        for connection in list(self.connections.values()):
            connection.drain()
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    # --- admission ------------------------------------------------------------------------

    def _admit(self, scope: Scope) -> access.Refusal | None:
        refusal = access.check(self.config.access, headers_of(scope), scope["query_string"])
        if refusal is not None:
            return refusal
        if self.draining:
            return access.Refusal(503, "server shutting down")
        limit = self.config.session.max_sessions
        if len(self.sessions) >= limit:
            return access.Refusal(503, f"server full: {limit} sessions")
        return None

    def _open(self, config: SessionConfig, audio: OutputFormat | None = None) -> Session:
        session = Session(uuid.uuid4().hex, self.worker.sample_rate, config, audio)
        self.sessions[session.id] = session
        self._idle.clear()
        self.metrics.sessions_opened.inc()
        return session

    def _closed(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        self.connections.pop(session.id, None)
        if not self.sessions:
            self._idle.set()

    def _refused(self, scope: Scope, refusal: access.Refusal) -> None:
        self.metrics.sessions_refused.labels(str(refusal.status)).inc()
        logs.event(
            "refused",
            path=scope["path"],
            status=refusal.status,
            reason=refusal.reason,
            client=_client(scope),
        )

    # --- WebSocket ------------------------------------------------------------------------

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # websocket.connect
        if scope["path"] != REALTIME_PATH:
            await refuse_websocket(
                send, 404, f"not found; the realtime endpoint is {REALTIME_PATH}"
            )
            return
        refusal = self._admit(scope)
        try:
            audio = self._audio_query(scope["query_string"])
        except VoicewsError as exc:
            refusal = refusal or access.Refusal(400, exc.message)
        if refusal is not None:
            self._refused(scope, refusal)
            await refuse_websocket(send, refusal.status, refusal.reason)
            return
        await send({"type": "websocket.accept"})
        session = self._open(self.config.session, audio)
        connection = RealtimeConnection(
            SessionDriver(session, self.worker, self.metrics.observe, self.agent), receive, send
        )
        self.connections[session.id] = connection
        if self.draining:
            connection.drain()
        logs.event("session_open", session=session.id, client=_client(scope))
        code = None
        try:
            code = await connection.run()
        finally:
            self._closed(session)
            logs.event("session_close", session=session.id, code=code)

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
            state = self._readiness()
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

    def _readiness(self) -> str:
        if self.draining:
            return "draining"
        if len(self.sessions) >= self.config.session.max_sessions:
            return "full"
        return "ready"

    async def _speech(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        cors = self._cors(headers_of(scope).get("origin"))
        if method == "OPTIONS":  # a browser's preflight for a cross-origin POST
            await respond(send, 204, b"", headers=[*cors, *_PREFLIGHT])
            return
        if method != "POST":
            await refuse(send, 405, "method_not_allowed", "use POST", [*cors, (b"allow", b"POST")])
            return
        refusal = self._admit(scope)
        if refusal is not None:
            self._refused(scope, refusal)
            extra = [(b"www-authenticate", b"Bearer")] if refusal.status == 401 else []
            await refuse(send, refusal.status, "refused", refusal.reason, [*cors, *extra])
            return
        # One request is one whole turn: its text may all wait in the backlog at once.
        config = self.config.session
        session = self._open(replace(config, max_pending_text_chars=config.max_turn_text_chars))
        self.metrics.http_speech.inc()
        try:
            driver = SessionDriver(session, self.worker, self.metrics.observe)
            await speech(driver, receive, send, self.config.voice_name, cors)
        finally:
            self._closed(session)

    def _cors(self, origin: str | None) -> list[tuple[bytes, bytes]]:
        """CORS headers for the speech endpoint: any origin, or those on the allow-list."""
        allowed = self.config.access.allowed_origins
        if origin is None or (allowed and origin not in allowed):
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
        parts = [p for p in path.split("/") if p] or ["index.html"]
        if self._web is None or any(p.startswith(".") or "\\" in p for p in parts):
            return None
        node = self._web.joinpath(*parts)
        return node if node.is_file() else None


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
