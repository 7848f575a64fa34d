"""``POST /v1/audio/speech``: OpenAI-compatible speech, streamed as it is synthesized.

The whole input is one turn of an ordinary session (same segmenter, stitcher and compute
worker as the WebSocket path), so the first bytes go out after the first segment, not after
the whole text. The session produces the response's rate (PCM16 for ``wav`` and ``pcm``,
float32 for the codecs); :class:`~voicews.encoding.ContainerEncoder` wraps it as it comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .. import logs
from ..asgi import Receive, Send
from ..core.config import SettingsUpdate
from ..core.events import AudioFrame, Error, TurnDone
from ..driver import SessionDriver
from ..encoding import ContainerEncoder, ResponseFormat, content_type, response_output
from ..errors import ErrorCode, VoicewsError, unknown_voice
from ..protocol import MAX_JSON_DEPTH, OPUS_RATE, SampleRate, too_deep

MAX_BODY = 1 << 20


OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable nova onyx sage shimmer verse marin cedar".split()
)
"""OpenAI's built-in voices, which its clients send by default: the server's default answers."""


class SpeechRequest(BaseModel):
    """The OpenAI ``audio/speech`` body; ``model`` is accepted as given, ``voice`` is one of
    the server's voices (``session_created.voices``) or of OpenAI's (:data:`OPENAI_VOICES`)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    input: str = Field(min_length=1)
    model: str | None = None
    voice: str | None = None
    speed: float = Field(default=1.0, ge=0.25, le=4.0)
    response_format: ResponseFormat = "mp3"
    stream_format: Literal["audio"] = "audio"
    """OpenAI's ``sse`` (base64 audio in events) is not served: refused, not ignored."""
    sample_rate: SampleRate | None = None
    """voicews only: the rate of any format but ``opus`` (48 kHz only)."""
    normalization: Literal["auto", "off"] = "auto"
    """voicews only: ``off`` speaks the text as written (numbers, symbols, abbreviations)."""

    @model_validator(mode="after")
    def _opus_is_48k(self) -> SpeechRequest:
        if self.response_format == "opus" and self.sample_rate not in (None, OPUS_RATE):
            raise ValueError(f"response_format opus is sample_rate {OPUS_RATE} only")
        return self


def answering_voice(requested: str | None, voices: Sequence[str]) -> str:
    """The voice that speaks a request: the one asked for if the server has it, else the
    server's default for none or an OpenAI voice; any other name is refused."""
    if requested is None or (requested in OPENAI_VOICES and requested not in voices):
        return voices[0]
    if requested in voices:
        return requested
    raise unknown_voice(requested, voices, ErrorCode.INVALID_REQUEST)


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None if it is larger than ``limit``."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


async def speech(
    driver: SessionDriver,
    body: bytes,
    receive: Receive,
    send: Send,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Serve one request whose ``body`` was read; the session must allow a whole turn's text
    as backlog. A request refused before the response starts raises :class:`VoicewsError`."""
    try:
        text = body.decode()
        if too_deep(text):
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        request = SpeechRequest.model_validate(json.loads(text or "null"))
    except (ValueError, ValidationError) as exc:
        raise VoicewsError(ErrorCode.INVALID_REQUEST, _describe(exc)) from None
    session, now = driver.session, driver.now()
    limit = session.config.max_turn_text_chars
    if len(request.input) > limit:
        raise VoicewsError(ErrorCode.INPUT_TOO_LONG, f"input over {limit} characters")
    voice = answering_voice(request.voice, session.config.voices)
    # The session's first turn is the response: it takes this format.
    session.audio = response_output(
        request.response_format, session.sample_rate, request.sample_rate
    )
    session.update(
        SettingsUpdate(speed=request.speed, voice=voice, normalization=request.normalization)
    )
    driver.refresh()
    session.turn_reset("speech", now)
    session.text_delta(request.input, now)
    session.end_text(now)
    driver.sync()
    streaming = asyncio.create_task(_stream(driver, request, send, voice, headers))
    disconnect = asyncio.create_task(_disconnected(receive))
    try:
        await asyncio.wait({streaming, disconnect}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (streaming, disconnect):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        driver.close()


async def _stream(
    driver: SessionDriver,
    request: SpeechRequest,
    send: Send,
    voice: str,
    headers: list[tuple[bytes, bytes]],
) -> None:
    session = driver.session
    rate = session.audio.sample_rate
    encoder = ContainerEncoder(request.response_format, rate)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", content_type(request.response_format, rate).encode()),
                (b"x-request-id", session.id.encode()),  # as the server's log lines name it
                (b"x-voicews-streamed", b"true"),
                (b"x-voicews-sample-rate", str(rate).encode()),
                (b"x-voicews-voice", voice.encode()),
                (b"x-accel-buffering", b"no"),  # any nginx in front: pass chunks on at once
                *headers,
            ],
        }
    )
    failed = False
    while (item := await driver.next_item()) is not None:
        if isinstance(item, AudioFrame):
            if data := encoder.push(item.pcm):
                await send({"type": "http.response.body", "body": data, "more_body": True})
        elif isinstance(item, Error):
            failed = True
            logs.event("error", session=driver.session.id, code=item.code, path="speech")
        elif isinstance(item, TurnDone):
            break
    if not failed:
        await send({"type": "http.response.body", "body": encoder.finish(), "more_body": False})
    # After a failure the body is left unterminated: the server closes the connection, so
    # the client sees a truncated transfer instead of a complete-looking short answer.


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
    return f"body is not valid JSON: {exc}"
