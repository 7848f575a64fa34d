"""The WebSocket endpoint: moves messages between an ASGI WebSocket and a session.

A receive loop feeds client frames to the session; a send loop drains its outbox. ``send``
waits while the socket is not writable, which is what makes a slow reader pause its own
synthesis (the session stops asking for more once its outbox is full). A peer that vanishes
while we wait for it to read ends the session as soon as the send loop finds out.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from . import logs
from .asgi import Receive, Send
from .driver import SessionDriver
from .errors import ErrorCode, VoicewsError
from .protocol import AudioFrame, Error, TurnDone, encode_event, encode_frame, parse_client_message
from .session import Session


@dataclass(frozen=True, slots=True)
class Closed:
    """How a session's connection ended: ``code`` is the close code the server sent, if it
    closed; ``lost`` is a peer that went away without a closing handshake (a reset, a
    keepalive timeout, a socket that failed while we wrote to it)."""

    code: int | None
    lost: bool


class RealtimeConnection:
    def __init__(
        self, driver: SessionDriver, receive: Receive, send: Send, max_sessions: int
    ) -> None:
        self.driver = driver
        self.session: Session = driver.session
        self._max_sessions = max_sessions
        self._receive = receive
        self._send = send

    async def run(self) -> Closed:
        """Serve until either side closes or the peer is gone.

        The receive and send loops run as two tasks and the first to end ends the session:
        the receive loop may be waiting for the client to read (backpressure) when the peer
        vanishes, and only the send loop, failing to write, then knows it.
        """
        session = self.session
        await self._send(
            {"type": "websocket.send", "text": encode_event(session.created(self._max_sessions))}
        )
        session.start(self.driver.now())
        self.driver.sync()
        sender = asyncio.create_task(self._send_loop())
        receiver = asyncio.create_task(self._receive_loop())
        try:
            await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.driver.close()
            for task in (receiver, sender):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
        code = None
        if sender.done() and not sender.cancelled() and sender.exception() is None:
            code = sender.result()
        lost = code is None and (
            receiver.cancelled() or receiver.exception() is not None or receiver.result() == 1006
        )
        return Closed(code, lost)

    async def _receive_loop(self) -> int:
        """Feed client frames to the session; returns the disconnect code."""
        while True:
            await self.driver.room_for_input()
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                code: int = message.get("code", 1005)
                return code
            if message["type"] == "websocket.receive":
                text = message.get("text")
                self._on_frame(text if text is not None else message.get("bytes") or b"")

    def drain(self) -> None:
        """Server shutdown: let the current turn finish, then close (going away)."""
        self.session.drain(self.driver.now())
        self.driver.sync()

    def _on_frame(self, data: str | bytes) -> None:
        session, now = self.session, self.driver.now()
        if session.close_request is not None:
            return  # closing (idle or shutdown): the close frame says why
        if session.admit(now):
            self.driver.refresh()
            limit = session.config.max_message_bytes
            size = len(data) if isinstance(data, bytes) else len(data.encode())
            try:
                if size > limit:
                    raise VoicewsError(
                        ErrorCode.MESSAGE_TOO_LARGE,
                        f"message of {size} bytes refused; the limit is {limit} bytes",
                    )
                session.handle(parse_client_message(data), now)
            except VoicewsError as exc:
                session.report(exc)
            except Exception:
                logs.log.exception("session %s: unexpected error handling a message", session.id)
                session.report(VoicewsError(ErrorCode.INTERNAL_ERROR, "internal error"))
        self.driver.sync()

    async def _send_loop(self) -> int:
        session = self.session
        while (item := await self.driver.next_item()) is not None:
            if isinstance(item, AudioFrame):
                await self._send({"type": "websocket.send", "bytes": encode_frame(item)})
                continue
            await self._send({"type": "websocket.send", "text": encode_event(item)})
            if isinstance(item, TurnDone):
                logs.event(
                    "turn_done",
                    session=session.id,
                    turn=item.turn_id,
                    samples=item.samples,
                    cancelled=item.cancelled,
                )
            elif isinstance(item, Error):
                logs.event("error", session=session.id, turn=item.turn_id, code=item.code)
        close = session.close_request
        assert close is not None
        await self._send({"type": "websocket.close", "code": close.code, "reason": close.reason})
        return close.code
