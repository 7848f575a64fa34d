"""The realtime dialect: protocol v1 over an ASGI WebSocket, translated to and from the core.

Each client message becomes one session call (``apply``); each core event is rendered as its
protocol event (``render``), each audio frame as a binary frame.

A receive loop feeds client frames to the session; a send loop drains its outbox. ``send``
waits while the socket is not writable, which is what makes a slow reader pause its own
synthesis (the session stops asking for more once its outbox is full). A peer that vanishes
while we wait for it to read ends the session as soon as the send loop finds out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from pydantic import BaseModel

from .. import logs
from .. import protocol as wire
from ..asgi import Receive, Send
from ..core import events as core
from ..core.config import SessionConfig, SettingsUpdate
from ..core.session import Session
from ..driver import SessionDriver
from ..errors import ErrorCode, VoicewsError


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
        """Serve until either side closes or the peer is gone (``SessionDriver.serve``)."""
        session = self.session
        await self._send(
            {
                "type": "websocket.send",
                "text": wire.encode_event(created(session, self._max_sessions)),
            }
        )
        session.start(self.driver.now())
        self.driver.sync()
        sender, receiver = await self.driver.serve(self._send_loop(), self._receive_loop())
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
                apply(session, wire.parse_client_message(data), now)
            except VoicewsError as exc:
                session.report(exc)
            except Exception:
                logs.log.exception("session %s: unexpected error handling a message", session.id)
                session.report(VoicewsError(ErrorCode.INTERNAL_ERROR, "internal error"))
        self.driver.sync()

    async def _send_loop(self) -> int:
        session = self.session
        while (item := await self.driver.next_item()) is not None:
            if isinstance(item, core.AudioFrame):
                await self._send({"type": "websocket.send", "bytes": wire.encode_frame(item)})
                continue
            await self._send({"type": "websocket.send", "text": wire.encode_event(render(item))})
            if isinstance(item, core.TurnDone):
                logs.event(
                    "turn_done",
                    session=session.id,
                    turn=item.turn_id,
                    samples=item.samples,
                    cancelled=item.cancelled,
                )
            elif isinstance(item, core.Error):
                logs.event("error", session=session.id, turn=item.turn_id, code=item.code)
        close = session.close_request
        assert close is not None
        await self._send({"type": "websocket.close", "code": close.code, "reason": close.reason})
        return close.code


def apply(session: Session, message: wire.ClientMessage, now: float) -> None:
    """One client message, as the session call it asks for."""
    match message:
        case wire.TurnReset():
            session.turn_reset(message.turn_id, now, message.context_id)
        case wire.TextDelta():
            session.text_delta(message.text, now, message.context_id)
        case wire.EndText():
            session.end_text(now, message.context_id)
        case wire.CloseContext():
            session.close_context(message.context_id, now)
        case wire.Cancel():
            session.cancel(now)
        case wire.SessionUpdate():
            audio = message.audio or wire.AudioUpdate()
            session.update(
                SettingsUpdate(
                    speed=message.speed,
                    voice=message.voice,
                    chunk_frames=message.chunk_frames,
                    overlap_frames=message.overlap_frames,
                    sample_rate=audio.sample_rate,
                    format=audio.format,
                    normalization=message.normalization,
                    locale=message.locale,
                    lexicon=message.lexicon,
                    context_idle_s=message.context_idle_s,
                )
            )
        case wire.UserMessage():
            session.user_message(message.text, message.turn_id, now)
        case wire.Playback():
            session.playback(message.turn_id, message.samples_played)
        case wire.Ping():
            session.ping(message.id)
        case _:
            assert_never(message)


def render(event: core.Event) -> BaseModel:
    """A core event as the protocol event of the same name."""
    match event:
        case core.SessionUpdated(audio=audio):
            return wire.SessionUpdated(
                audio=wire.AudioFormat(sample_rate=audio.sample_rate, format=audio.format),
                speed=event.speed,
                normalization=event.normalization,
                locale=event.locale,
                voice=event.voice,
                live_turn_id=event.live_turn_id,
                context_idle_s=event.context_idle_s,
            )
        case core.TurnStarted():
            return wire.TurnStarted(turn_id=event.turn_id, context_id=event.context_id)
        case core.ReplyDelta():
            return wire.ReplyDelta(turn_id=event.turn_id, text=event.text)
        case core.Pong():
            return wire.Pong(id=event.id)
        case core.SegmentStarted():
            return wire.SegmentStarted(
                turn_id=event.turn_id,
                text=event.text,
                start_sample=event.start_sample,
                spoken=event.spoken,
                context_id=event.context_id,
            )
        case core.Words():
            marks = [wire.WordMark(text=m.text, start_sample=m.start_sample) for m in event.words]
            return wire.Words(turn_id=event.turn_id, words=marks, context_id=event.context_id)
        case core.TurnDone():
            return wire.TurnDone(
                turn_id=event.turn_id,
                samples=event.samples,
                cancelled=event.cancelled,
                heard_text=event.heard_text,
                context_id=event.context_id,
            )
        case core.Error():
            return wire.Error(
                code=event.code,
                message=event.message,
                turn_id=event.turn_id,
                context_id=event.context_id,
            )
        case core.ContextClosed():
            return wire.ContextClosed(context_id=event.context_id, reason=event.reason)
        case _:
            assert_never(event)


def created(session: Session, max_sessions: int) -> wire.SessionCreated:
    """The first event of a connection: the session's format, limits and voices."""
    audio = session.audio
    return wire.SessionCreated(
        session_id=session.id,
        audio=wire.AudioFormat(sample_rate=audio.sample_rate, format=audio.format),
        limits=limits(session.config, max_sessions),
        voices=list(session.config.voices) or None,
    )


def limits(config: SessionConfig, max_sessions: int) -> wire.Limits:
    """What a session enforces, and what its server admits (``max_sessions``)."""
    return wire.Limits(
        max_message_bytes=config.max_message_bytes,
        max_turn_text_chars=config.max_turn_text_chars,
        max_pending_text_chars=config.max_pending_text_chars,
        max_pending_audio_ms=config.max_pending_audio_ms,
        max_messages_per_second=config.max_messages_per_second,
        max_sessions=max_sessions,
        idle_timeout_s=config.idle_timeout_s,
        max_turn_seconds=config.max_turn_seconds,
        max_contexts=config.max_contexts,
        context_idle_s=config.context_idle_s,
    )
