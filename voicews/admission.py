"""Who may open a session, and the sessions open: one layer every dialect calls.

A request is admitted by access (token, origin: ``access.py``), then by capacity (the session
cap, draining). The live sessions and their connections are kept here, so a WebSocket, an
HTTP speech request and a Wyoming connection count against the same cap and drain together.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Protocol

from . import access, logs
from .compute.worker import Worker
from .core.config import SessionConfig
from .core.session import Session
from .encoding import OutputFormat
from .errors import ErrorCode, VoicewsError
from .metrics import Metrics


class Connection(Protocol):
    """A live session's connection, whatever its dialect."""

    def drain(self) -> None:
        """Server shutdown: let the current turn finish, then close."""


class Admission:
    def __init__(self, policy: access.AccessPolicy, max_sessions: int, worker: Worker):
        self.policy = policy
        self.max_sessions = max_sessions
        self.worker = worker
        self.sessions: dict[str, Session] = {}
        self.connections: dict[str, Connection] = {}
        self.metrics = Metrics(worker, self.sessions)
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def admit(
        self,
        headers: dict[str, str],
        query: bytes,
        path: str,
        client: str | None,
        token_later: bool = False,
    ) -> None:
        """Raise the refusal (logged and counted) if this request may not open a session;
        ``token_later``: its token comes in its first message (the dialect checks it)."""
        policy = replace(self.policy, tokens=frozenset()) if token_later else self.policy
        refusal = access.check(policy, headers, query)
        if refusal is None:
            refusal = self.capacity_refusal()
        if refusal is None:
            return
        self.metrics.sessions_refused.labels(str(refusal.status)).inc()
        logs.event(
            "refused", path=path, status=refusal.status, reason=refusal.message, client=client
        )
        raise refusal

    def capacity_refusal(self) -> VoicewsError | None:
        """Draining or full: refused on every path (WebSocket, HTTP, Wyoming)."""
        if self.draining:
            return VoicewsError(ErrorCode.SHUTTING_DOWN, "server shutting down")
        limit = self.max_sessions
        if len(self.sessions) >= limit:
            return VoicewsError(ErrorCode.SERVER_FULL, f"server full: {limit} sessions")
        return None

    def open_session(self, config: SessionConfig, audio: OutputFormat | None = None) -> Session:
        """A new session; its frames in ``audio`` (default: PCM16 at the voice's rate)."""
        session = Session(uuid.uuid4().hex, self.worker.sample_rate, config, audio)
        self.sessions[session.id] = session
        self._idle.clear()
        self.metrics.sessions_opened.inc()
        return session

    def close_session(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        self.connections.pop(session.id, None)
        if not self.sessions:
            self._idle.set()

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

    def readiness(self) -> str:
        """``warming``: the engine is compiling its kernels; ``overloaded``: the worker is past
        what it can keep smooth. Either way a load balancer should send new conversations
        elsewhere (this one still admits them; while warming their audio waits)."""
        if self.draining:
            return "draining"
        if not self.worker.warmed.is_set():
            return "warming"
        if len(self.sessions) >= self.max_sessions:
            return "full"
        if self.worker.overloaded:
            return "overloaded"
        return "ready"
