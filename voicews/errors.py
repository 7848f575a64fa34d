"""Error codes, the one exception that carries them, and how each code is answered.

Every refusal the service makes is a :class:`VoicewsError` with a code from :class:`ErrorCode`,
caught in one place per endpoint and answered as :data:`ANSWERS` says::

    VoicewsError(code, message, turn_id)
    ├── on an open session (realtime.py): an ``error`` event; the session goes on
    │   (after ``idle_timeout`` it closes with CloseCode.NORMAL_CLOSURE)
    ├── at the WebSocket handshake (app.py): the HTTP status, a plain-text reason
    └── over HTTP (the speech endpoint, app.py): the HTTP status and :func:`http_body`

Anything else that escapes a session is reported as ``internal_error`` with no details.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from http import HTTPStatus


class ErrorCode(StrEnum):
    """Wire error codes, for ``error`` events and HTTP error bodies."""

    INVALID_JSON = "invalid_json"
    """A text frame that is not valid JSON. (Invalid UTF-8 closes the socket with 1007.)"""
    INVALID_MESSAGE = "invalid_message"
    """Valid JSON whose fields are missing, unknown, out of bounds or of the wrong type."""
    UNKNOWN_TYPE = "unknown_type"
    """A JSON object whose ``type`` is missing or not a client message type."""
    BINARY_NOT_SUPPORTED = "binary_not_supported"
    """Clients send JSON text frames only."""
    MESSAGE_TOO_LARGE = "message_too_large"
    """A frame over ``limits.max_message_bytes``."""
    NO_ACTIVE_TURN = "no_active_turn"
    """``text_delta``, ``end_text`` or ``cancel`` with no live turn (in the context named,
    if any), or ``close_context`` of a context that is not open."""
    TOO_MANY_CONTEXTS = "too_many_contexts"
    """A ``turn_reset`` that would open more contexts than ``limits.max_contexts``; close one
    with ``close_context`` first."""
    TURN_CLOSED = "turn_closed"
    """``text_delta`` or ``end_text`` after the turn's ``end_text``."""
    DUPLICATE_TURN_ID = "duplicate_turn_id"
    """A ``turn_reset`` that reuses the id of the session's latest turn."""
    TEXT_BACKLOG_FULL = "text_backlog_full"
    """The delta would push unspoken text over ``limits.max_pending_text_chars``."""
    TURN_TEXT_TOO_LONG = "turn_text_too_long"
    """The delta would push the turn's text over ``limits.max_turn_text_chars``."""
    RATE_LIMITED = "rate_limited"
    """More messages per second than ``limits.max_messages_per_second``; the message is refused."""
    TURN_DURATION_EXCEEDED = "turn_duration_exceeded"
    """The turn ran longer than ``limits.max_turn_seconds``; it is cut like a barge-in."""
    IDLE_TIMEOUT = "idle_timeout"
    """No message and no turn for ``limits.idle_timeout_s``; the server then closes."""
    SHUTTING_DOWN = "shutting_down"
    """The server drains: a ``turn_reset`` is refused (the session closes once the live turn
    is done), and so is a new connection or speech request."""
    AGENT_UNAVAILABLE = "agent_unavailable"
    """A ``user_message`` to a server started without ``--agent-model``."""
    GENERATION_FAILED = "generation_failed"
    """The agent's language model failed; the reply ends with what was generated."""
    SYNTHESIS_FAILED = "synthesis_failed"
    """The engine failed on the turn's text; the turn ends, the session goes on."""
    INTERNAL_ERROR = "internal_error"
    """A bug on our side; details are logged, never sent."""

    # Before a session exists: refusals at the handshake or of an HTTP request.
    NOT_FOUND = "not_found"
    """A WebSocket handshake on a path other than the realtime endpoint."""
    UNAUTHORIZED = "unauthorized"
    """The server requires a bearer token and none, or a wrong one, was offered."""
    ORIGIN_NOT_ALLOWED = "origin_not_allowed"
    """A browser ``Origin`` that is not on the server's allow-list."""
    SERVER_FULL = "server_full"
    """The server holds its ``max_sessions`` sessions already."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """The speech endpoint takes ``POST`` only."""
    REQUEST_TOO_LARGE = "request_too_large"
    """A speech request body over 1 MiB; the server closes the connection."""
    REQUEST_TIMEOUT = "request_timeout"
    """A speech request body that did not arrive within the server's ``request_timeout``
    (a request head that does not is answered 408 by the transport, without a body); the
    server closes the connection."""
    INVALID_REQUEST = "invalid_request"
    """A speech request body that is not JSON, or has a missing or invalid field; or a realtime
    URL whose ``sample_rate`` or ``format`` is not one of the allowed values."""
    INPUT_TOO_LONG = "input_too_long"
    """A speech ``input`` over ``max_turn_text_chars``."""


class CloseCode(IntEnum):
    """The WebSocket close codes the service sends itself (RFC 6455's names)."""

    NORMAL_CLOSURE = 1000
    """After ``idle_timeout``."""
    GOING_AWAY = 1001
    """Server shutdown, once the session's live turn is done."""
    POLICY_VIOLATION = 1008
    """The ElevenLabs dialect: a first message without a valid ``xi_api_key``, where the
    handshake offered no token."""


@dataclass(frozen=True, slots=True)
class Answer:
    """How a code reaches the client."""

    event: bool = True
    """On an open session, as an ``error`` event."""
    status: HTTPStatus | None = None
    """Before a session exists (a refused handshake, an HTTP request), with this status."""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    """Headers an HTTP error response carries besides the body's."""


_CLOSE = (b"connection", b"close")
"""The rest of the request body is never read: the connection cannot carry another."""


def _http(status: HTTPStatus, *headers: tuple[bytes, bytes]) -> Answer:
    return Answer(event=False, status=status, headers=headers)


ANSWERS: dict[ErrorCode, Answer] = {code: Answer() for code in ErrorCode} | {
    ErrorCode.SHUTTING_DOWN: Answer(status=HTTPStatus.SERVICE_UNAVAILABLE),
    ErrorCode.NOT_FOUND: _http(HTTPStatus.NOT_FOUND),
    ErrorCode.UNAUTHORIZED: _http(HTTPStatus.UNAUTHORIZED, (b"www-authenticate", b"Bearer")),
    ErrorCode.ORIGIN_NOT_ALLOWED: _http(HTTPStatus.FORBIDDEN),
    ErrorCode.SERVER_FULL: _http(HTTPStatus.SERVICE_UNAVAILABLE),
    ErrorCode.METHOD_NOT_ALLOWED: _http(HTTPStatus.METHOD_NOT_ALLOWED, (b"allow", b"POST")),
    ErrorCode.REQUEST_TOO_LARGE: _http(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, _CLOSE),
    ErrorCode.REQUEST_TIMEOUT: _http(HTTPStatus.REQUEST_TIMEOUT, _CLOSE),
    ErrorCode.INVALID_REQUEST: _http(HTTPStatus.BAD_REQUEST),
    ErrorCode.INPUT_TOO_LONG: _http(HTTPStatus.REQUEST_ENTITY_TOO_LARGE),
}
SESSION_CODES = tuple(code for code in ErrorCode if ANSWERS[code].event)
"""The codes an ``error`` event can carry (the schema lists them as examples)."""


class VoicewsError(Exception):
    """A refusal with a wire code; ``turn_id`` names the turn it concerns, if any."""

    def __init__(self, code: ErrorCode, message: str, turn_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.turn_id = turn_id

    @property
    def status(self) -> int:
        """The HTTP status that answers it before a session exists."""
        status = ANSWERS[self.code].status
        if status is None:
            raise ValueError(f"{self.code} is only ever an error event")
        return int(status)


def http_body(error: VoicewsError) -> str:
    """The body OpenAI clients read: ``{"error": {"code", "message"}}``."""
    return json.dumps({"error": {"code": error.code, "message": error.message}}) + "\n"


def unknown_voice(
    voice: str, voices: Sequence[str], code: ErrorCode = ErrorCode.INVALID_MESSAGE
) -> VoicewsError:
    """The refusal of a voice the server does not have, naming those it has."""
    choices = ", ".join(voices)
    return VoicewsError(code, f"voice: unknown voice {voice!r}; choose from {choices}")
