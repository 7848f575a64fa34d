"""ASGI types and the few HTTP helpers the endpoints share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .errors import ANSWERS, VoicewsError, http_body

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def headers_of(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name; a repeated one's values joined by ", " as
    RFC 9110 (5.3) combines them, never one of them silently chosen."""
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        name, text = key.decode("latin-1").lower(), value.decode("latin-1")
        headers[name] = f"{headers[name]}, {text}" if name in headers else text
    return headers


async def respond(
    send: Send,
    status: int,
    body: bytes | str,
    content_type: str = "text/plain; charset=utf-8",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = body.encode() if isinstance(body, str) else body
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def refuse(send: Send, error: VoicewsError, headers: list[tuple[bytes, bytes]]) -> None:
    """An HTTP error: the code's status and headers, the body in the shape OpenAI clients read."""
    headers = [*headers, *ANSWERS[error.code].headers]
    await respond(send, error.status, http_body(error), "application/json", headers)


async def refuse_websocket(send: Send, error: VoicewsError) -> None:
    """Answer a WebSocket handshake with a plain HTTP error instead of accepting it."""
    data = (error.message + "\n").encode()
    await send(
        {
            "type": "websocket.http.response.start",
            "status": error.status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "websocket.http.response.body", "body": data})
