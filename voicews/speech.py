"""``POST /v1/audio/speech``: OpenAI-compatible speech, streamed as it is synthesized.

The whole input is one turn of an ordinary session (same segmenter, stitcher and compute
worker as the WebSocket path), so the first bytes go out after the first segment, not after
the whole text. WAV responses carry a header written for unknown length.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import logs
from .asgi import Receive, Send, respond
from .driver import SessionDriver
from .protocol import (
    AudioFrame,
    EndText,
    Error,
    SessionUpdate,
    TextDelta,
    TurnDone,
    TurnReset,
    unknown_voice,
)

_MAX_BODY = 1 << 20
_UNKNOWN_LENGTH = 0xFFFFFFFF


class SpeechRequest(BaseModel):
    """The OpenAI ``audio/speech`` body; ``model`` is accepted as given, ``voice`` must be one
    of the server's voices (``session_created.voices``)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    input: str = Field(min_length=1)
    model: str | None = None
    voice: str | None = None
    speed: float = Field(default=1.0, ge=0.5, le=2.0)
    response_format: Literal["wav", "pcm"] = "wav"


def wav_header(sample_rate: int) -> bytes:
    """A PCM16 mono WAV header whose sizes say 'unknown' (streaming readers accept it)."""
    return b"".join(
        [
            b"RIFF", struct.pack("<I", _UNKNOWN_LENGTH), b"WAVE",
            b"fmt ", struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16),
            b"data", struct.pack("<I", _UNKNOWN_LENGTH - 36),
        ]
    )  # fmt: skip


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
    receive: Receive,
    send: Send,
    voice: str,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Serve one request; the session must allow a whole turn's text as backlog."""
    body = await read_body(receive, _MAX_BODY)
    if body is None:
        await refuse(send, 413, "request_too_large", f"body over {_MAX_BODY} bytes", headers)
        return
    try:
        request = SpeechRequest.model_validate(json.loads(body or b"null"))
    except (ValueError, ValidationError) as exc:
        await refuse(send, 400, "invalid_request", _describe(exc), headers)
        return
    session, now = driver.session, driver.now()
    limit = session.config.max_turn_text_chars
    if len(request.input) > limit:
        await refuse(send, 413, "input_too_long", f"input over {limit} characters", headers)
        return
    if request.voice is not None and request.voice not in session.config.voices:
        refusal = unknown_voice(request.voice, session.config.voices)
        await refuse(send, 400, "invalid_request", refusal.message, headers)
        return
    voice = request.voice or voice
    for message in (
        SessionUpdate(speed=request.speed, voice=request.voice),
        TurnReset(turn_id="speech"),
        TextDelta(text=request.input),
        EndText(),
    ):
        session.handle(message, now)
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
    rate = driver.session.sample_rate
    wav = request.response_format == "wav"
    pcm_type = f"audio/pcm;rate={rate};channels=1;encoding=s16le"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"audio/wav" if wav else pcm_type.encode()),
                (b"x-voicews-streamed", b"true"),
                (b"x-voicews-sample-rate", str(rate).encode()),
                (b"x-voicews-voice", voice.encode()),
                (b"x-accel-buffering", b"no"),  # any nginx in front: pass chunks on at once
                *headers,
            ],
        }
    )
    if wav:
        await send({"type": "http.response.body", "body": wav_header(rate), "more_body": True})
    failed = False
    while (item := await driver.next_item()) is not None:
        if isinstance(item, AudioFrame):
            await send({"type": "http.response.body", "body": item.pcm, "more_body": True})
        elif isinstance(item, Error):
            failed = True
            logs.event("error", session=driver.session.id, code=item.code, path="speech")
        elif isinstance(item, TurnDone):
            break
    if not failed:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    # After a failure the body is left unterminated: the server closes the connection, so
    # the client sees a truncated transfer instead of a complete-looking short answer.


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def refuse(
    send: Send, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]]
) -> None:
    """Errors in the shape OpenAI clients read: ``{"error": {"code", "message"}}``."""
    body = json.dumps({"error": {"code": code, "message": message}}) + "\n"
    await respond(send, status, body, "application/json", headers)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
    return f"body is not valid JSON: {exc}"
