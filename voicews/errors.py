"""Error codes and the one exception type that carries them to the wire.

Every refusal the service makes has a code from :class:`ErrorCode`; the session and the
protocol parser raise :class:`VoicewsError`, and the server turns it into an ``error`` event
in one place. Anything else that escapes is reported as ``internal_error`` with no details.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Wire error codes. None closes the connection by itself; ``idle_timeout`` comes just
    before the server closes (1000)."""

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
    """``text_delta``, ``end_text`` or ``cancel`` with no live turn."""
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
    """No message and no turn for ``limits.idle_timeout_s``; the server then closes (1000)."""
    SHUTTING_DOWN = "shutting_down"
    """A ``turn_reset`` while the server drains; it closes (1001) once the live turn is done."""
    AGENT_UNAVAILABLE = "agent_unavailable"
    """A ``user_message`` to a server started without ``--agent-model``."""
    GENERATION_FAILED = "generation_failed"
    """The agent's language model failed; the reply ends with what was generated."""
    SYNTHESIS_FAILED = "synthesis_failed"
    """The engine failed on the turn's text; the turn ends, the session goes on."""
    REQUEST_TIMEOUT = "request_timeout"
    """HTTP only: a request body did not arrive within the server's request timeout (408);
    the server closes the connection."""
    INTERNAL_ERROR = "internal_error"
    """A bug on our side; details are logged, never sent."""


class VoicewsError(Exception):
    """A refusal with a wire code; ``turn_id`` names the turn it concerns, if any."""

    def __init__(self, code: ErrorCode, message: str, turn_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.turn_id = turn_id
