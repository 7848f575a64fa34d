"""The ElevenLabs WebSocket dialect: ``stream-input`` and ``multi-stream-input`` over the
same session core, so the agent frameworks' ElevenLabs services work against voicews.

Each ElevenLabs context is a session context; a context's text runs in turns: text opens one,
``flush`` ends it (more text after a flush waits for it to be spoken, then opens the next).
``close_context`` right after a flush with no text (how Pipecat and LiveKit end every reply)
lets the flushed text finish and then says ``isFinal``, unless another context takes the voice
first; any other close is a barge-in, cut at once. Audio goes out as base64 in the format
the URL asked for; each segment's character alignment is spread from the engine's word marks
over the characters of each word, keyed to the text as sent, once the segment's end is known.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import access, logs
from ..asgi import Receive, Send
from ..core import events as core
from ..core.config import Normalization, SettingsUpdate
from ..core.session import Session
from ..driver import SessionDriver
from ..errors import CloseCode, ErrorCode, VoicewsError
from .elevenlabs_audio import DEFAULT, AudioFormat, ContextAudio, parse_format

PATH = re.compile(r"^/v1/text-to-speech/([^/]{1,128})/(stream-input|multi-stream-input)$")
DEFAULT_CONTEXT = "default"
"""The context of a ``multi-stream-input`` message that names none."""


@dataclass(frozen=True, slots=True)
class Request:
    """What the URL asks for: the voice, one context or several, the audio, the reading."""

    voice_id: str
    multi: bool
    audio: AudioFormat
    normalization: Normalization | None
    inactivity_timeout: float | None
    sync_alignment: bool = False
    """Alignment times count from the context's first audio (LiveKit asks for this); without
    it each message's times start at zero (Pipecat adds them up itself)."""


def parse_request(path: str, query: bytes) -> Request | None:
    """The request an ElevenLabs URL makes; None for a path that is not one; a bad query
    parameter is ``invalid_request`` (HTTP 400). Parameters we do not act on (``model_id``,
    ``auto_mode``, ``sync_alignment``, ...) are ignored, as the cloud ignores what it does not
    know."""
    match = PATH.match(path)
    if match is None:
        return None
    params = {k: v[-1] for k, v in parse_qs(query.decode("latin-1")).items()}
    audio = parse_format(params.get("output_format", DEFAULT))
    normalization: Normalization | None = None
    if (reading := params.get("apply_text_normalization")) is not None:
        normalization = "off" if reading == "off" else "auto"
    timeout = None
    if (value := params.get("inactivity_timeout")) is not None:
        try:
            timeout = min(180.0, max(5.0, float(value)))
        except ValueError:
            raise VoicewsError(
                ErrorCode.INVALID_REQUEST, f"inactivity_timeout {value!r} is not a number"
            ) from None
    return Request(
        match.group(1),
        match.group(2) == "multi-stream-input",
        audio,
        normalization,
        timeout,
        params.get("sync_alignment") == "true",
    )


def credential(headers: dict[str, str]) -> dict[str, str]:
    """The headers, with an ``xi-api-key`` offered as voicews' bearer token."""
    key = headers.get("xi-api-key")
    if key and "authorization" not in headers:
        return {**headers, "authorization": f"Bearer {key}"}
    return headers


class VoiceSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    speed: float | None = Field(default=None, ge=0.25, le=4.0)


class Message(BaseModel):
    """A client message; fields the cloud takes and we do not act on are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    text: str | None = None
    context_id: str | None = Field(default=None, min_length=1, max_length=128)
    flush: bool = False
    close_context: bool = False
    close_socket: bool = False
    voice_settings: VoiceSettings | None = None
    xi_api_key: str | None = None


def parse_message(data: str | bytes) -> Message:
    if isinstance(data, bytes):
        raise VoicewsError(ErrorCode.BINARY_NOT_SUPPORTED, "send JSON text messages")
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise VoicewsError(ErrorCode.INVALID_JSON, f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise VoicewsError(ErrorCode.INVALID_MESSAGE, "a message must be a JSON object")
    try:
        return Message.model_validate(obj)
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise VoicewsError(ErrorCode.INVALID_MESSAGE, where) from None


def alignment(
    text: str, words: list[core.WordMark] | None, start: int, end: int, rate: int
) -> dict[str, list[Any]]:
    """A segment's characters and their times in ms from its start: each word's span (to the
    next word's start, the last to the segment's end) spread evenly over its characters, a
    space of no duration after each word, so a client's clock advanced by the last
    character's end stays on the audio."""
    units = [(m.text, m.start_sample) for m in words] if words else [(text, start)]
    chars: list[str] = []
    starts: list[int] = []
    durations: list[int] = []
    for i, (word, at) in enumerate(units):
        until = units[i + 1][1] if i + 1 < len(units) else end
        span = max(0, until - at) / len(word) if word else 0.0
        for k, char in enumerate(word):
            begin = round((at - start + k * span) * 1000 / rate)
            finish = round((at - start + (k + 1) * span) * 1000 / rate)
            chars.append(char)
            starts.append(begin)
            durations.append(finish - begin)
        chars.append(" ")
        starts.append(round((max(at, until) - start) * 1000 / rate))
        durations.append(0)
    return {"chars": chars, "charStartTimesMs": starts, "charDurationsMs": durations}


@dataclass(slots=True)
class _Segment:
    text: str
    start: int
    words: list[core.WordMark] | None = None


@dataclass(slots=True)
class _Context:
    """What the dialect keeps of one ElevenLabs context."""

    turn: str | None = None
    """Its live turn."""
    flushed: bool = False
    """Its live turn's text is all in (a ``flush``)."""
    waiting: list[str] = field(default_factory=list)
    """Text sent after a flush, for the turn after the live one."""
    flush_waiting: bool = False
    ended: bool = False
    """Its last message was a flush with no text: the client's end of the reply."""
    closing: bool = False
    """Closed at the end of its reply: it says ``isFinal`` once the flushed text is spoken."""
    segment: _Segment | None = None
    """The segment whose alignment waits for its end."""
    base: int = 0
    """Samples of the context's earlier turns."""


class ElevenLabsConnection:
    def __init__(
        self,
        driver: SessionDriver,
        receive: Receive,
        send: Send,
        request: Request,
        policy: access.AccessPolicy | None,
    ) -> None:
        """``policy``: where the handshake carried no token, the first message's
        ``xi_api_key`` must pass it."""
        self.driver = driver
        self.session: Session = driver.session
        self.request = request
        self._receive = receive
        self._send = send
        self._policy = policy
        self._contexts: dict[str | None, _Context] = {}
        self._turns = 0
        self._ending = False  # stream-input: the empty text came, isFinal after the turn
        self._audio = ContextAudio(request.audio)

    async def run(self) -> None:
        session, request = self.session, self.request
        voices = session.config.voices
        voice = request.voice_id if request.voice_id in voices else None
        if voice is None and voices:
            logs.log.warning(
                "elevenlabs: unknown voice_id %r; speaking with %r", request.voice_id, voices[0]
            )
        session.start(self.driver.now())
        session.update(
            SettingsUpdate(
                voice=voice,
                normalization=request.normalization,
                context_idle_s=request.inactivity_timeout,
            )
        )
        self.driver.sync()
        await self.driver.serve(self._send_loop(), self._receive_loop())

    def drain(self) -> None:
        """Server shutdown: let the live turns finish, then close."""
        self.session.drain(self.driver.now())
        self.driver.sync()

    # --- in -------------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        while True:
            await self.driver.room_for_input()
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["type"] == "websocket.receive":
                text = message.get("text")
                self._on_frame(text if text is not None else message.get("bytes") or b"")

    def _on_frame(self, data: str | bytes) -> None:
        session, now = self.session, self.driver.now()
        if session.close_request is not None:
            return
        if session.admit(now):
            self.driver.refresh()
            try:
                message = parse_message(data)
                self._authorize(message)
                self._apply(message, now)
            except VoicewsError as exc:
                session.report(exc)
            except Exception:
                logs.log.exception("session %s: unexpected error handling a message", session.id)
                session.report(VoicewsError(ErrorCode.INTERNAL_ERROR, "internal error"))
        self.driver.sync()

    def _authorize(self, message: Message) -> None:
        if self._policy is None:
            return
        offered = {"authorization": f"Bearer {message.xi_api_key or ''}"}
        if access.check(self._policy, offered, b"") is not None:
            self.session.close_request = core.Close(CloseCode.POLICY_VIOLATION, "unauthorized")
            raise VoicewsError(ErrorCode.UNAUTHORIZED, "missing or invalid xi_api_key")
        self._policy = None

    def _apply(self, message: Message, now: float) -> None:
        session = self.session
        key = (message.context_id or DEFAULT_CONTEXT) if self.request.multi else None
        speed = message.voice_settings.speed if message.voice_settings else None
        if speed is not None:
            session.update(SettingsUpdate(speed=speed))
        if message.close_socket:
            for name in [k for k in self._contexts if k is not None]:
                session.close_context(name, now)
            session.close_request = core.Close(CloseCode.NORMAL_CLOSURE, "close_socket")
            return
        text = message.text
        context = self._contexts.get(key)
        if text == "" and not self.request.multi:
            self._end_of_input(now)
        elif text:
            self._text(key, text, now)
        elif text == "" and context is not None and context.turn and not context.flushed:
            session.text_delta("", now, key)  # a keepalive: the context is not idle
        if message.flush:
            self._flush(key, now)
        if key in self._contexts and (text or message.flush):
            self._contexts[key].ended = message.flush and not text
        if message.close_context and key is not None:
            self._close(key, now)

    def _end_of_input(self, now: float) -> None:
        """stream-input's empty text: speak the rest, say ``isFinal``, close."""
        self._ending = True
        context = self._contexts.get(None)
        if context is None or context.turn is None:
            self.session.close_request = core.Close(CloseCode.NORMAL_CLOSURE, "end of input")
        else:
            self._flush(None, now)

    def _text(self, key: str | None, text: str, now: float) -> None:
        context = self._contexts.setdefault(key, _Context())
        for other, state in self._contexts.items():
            if state.closing and other != key and other is not None:
                state.closing = False
                self.session.close_context(other, now)  # the voice goes to the newer context
        context.closing = False
        if context.flushed:
            context.waiting.append(text)
            return
        if context.turn is None:
            self._start(key, context, now)
        self.session.text_delta(text, now, key)

    def _start(self, key: str | None, context: _Context, now: float) -> None:
        self._turns += 1
        context.turn = f"{key or 'stream'}-{self._turns}"
        context.flushed = False
        self.session.turn_reset(context.turn, now, key)

    def _flush(self, key: str | None, now: float) -> None:
        context = self._contexts.get(key)
        if context is None or context.turn is None:
            return
        if context.flushed:
            context.flush_waiting = bool(context.waiting)
            return
        context.flushed = True
        self.session.end_text(now, key)

    def _close(self, key: str, now: float) -> None:
        context = self._contexts.get(key)
        if context is None:
            return
        if context.turn is not None and context.flushed and context.ended:
            context.closing = True  # the end of a reply: finish it, then isFinal
            return
        self.session.close_context(key, now)

    # --- out ------------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        session = self.session
        while (item := await self.driver.next_item()) is not None:
            for reply in self._render(item):
                await self._send({"type": "websocket.send", "text": json.dumps(reply)})
            self.driver.sync()
        close = session.close_request
        assert close is not None
        await self._send({"type": "websocket.close", "code": close.code, "reason": close.reason})

    def _render(self, item: core.Outgoing) -> list[dict[str, Any]]:
        """An outbox item as the ElevenLabs messages it makes (often none)."""
        key = getattr(item, "context_id", None)
        context = self._contexts.get(key)
        tag = {"contextId": key} if self.request.multi and key is not None else {}
        rate = self.request.audio.session.sample_rate
        out: list[dict[str, Any]] = []
        match item:
            case core.AudioFrame():
                out += _audio(self._audio.frame(key, item.pcm), tag)
            case core.SegmentStarted() if context is not None:
                out += self._aligned(context, item.start_sample, rate, tag)
                context.segment = _Segment(item.text, item.start_sample)
            case core.Words() if context is not None and context.segment is not None:
                context.segment.words = item.words
            case core.TurnDone() if context is not None and context.turn == item.turn_id:
                if item.cancelled:
                    self._audio.drop(key)
                else:
                    out += _audio(self._audio.finish(key), tag)
                    out += self._aligned(context, item.samples, rate, tag)
                context.segment, context.turn, context.flushed = None, None, False
                context.base += item.samples
                out += self._next_turn(key, context, tag)
            case core.ContextClosed():
                self._contexts.pop(key, None)
                self._audio.drop(key)
                out.append({"isFinal": True, **tag})
            case core.Error():
                logs.event("error", session=self.session.id, context=key, code=item.code)
                out.append({"message": item.message, "error": item.code, **tag})
        return out

    def _aligned(
        self, context: _Context, end: int, rate: int, tag: dict[str, Any]
    ) -> list[dict[str, Any]]:
        segment = context.segment
        if segment is None:
            return []
        context.segment = None
        marks = alignment(segment.text, segment.words, segment.start, end, rate)
        if self.request.sync_alignment:
            shift = round((context.base + segment.start) * 1000 / rate)
            marks["charStartTimesMs"] = [t + shift for t in marks["charStartTimesMs"]]
        return [{"audio": None, "alignment": marks, "normalizedAlignment": marks, **tag}]

    def _next_turn(
        self, key: str | None, context: _Context, tag: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """A context's turn is spoken: its waiting text opens the next, else a close or the
        end of input that waited for it happens now."""
        now = self.driver.now()
        if context.waiting:
            text, context.waiting = "".join(context.waiting), []
            self._start(key, context, now)
            self.session.text_delta(text, now, key)
            if context.flush_waiting:
                context.flush_waiting = False
                self._flush(key, now)
        elif context.closing and key is not None:
            self.session.close_context(key, now)
        elif self._ending and key is None:
            self.session.close_request = core.Close(CloseCode.NORMAL_CLOSURE, "end of input")
            return [{"isFinal": True, **tag}]
        return []


def _audio(data: bytes, tag: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"audio": base64.b64encode(data).decode(), **tag}] if data else []
