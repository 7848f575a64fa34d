"""Server -> client events of protocol v1: open to new fields within the version."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..encoding import Encoding
from ..errors import SESSION_CODES

PROTOCOL_VERSION = 1


def _optional_not_required(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Fields left out when empty (``exclude_none``) must not be listed as required."""
    optional = {n for n, f in model.model_fields.items() if f.default is None}
    schema["required"] = [n for n in schema.get("required", []) if n not in optional]


class _Event(BaseModel):
    """Server events: open to new fields within a protocol version (clients ignore them)."""

    model_config = ConfigDict(
        frozen=True,
        json_schema_serialization_defaults_required=True,
        json_schema_extra=_optional_not_required,
    )


class AudioFormat(_Event):
    """What the binary frames of a turn carry; positions count samples at this rate."""

    sample_rate: int
    channels: Literal[1] = 1
    format: Encoding = "pcm_s16le"


class Limits(_Event):
    """Bounds the server enforces (see PROTOCOL.md for what each does when exceeded)."""

    max_message_bytes: int
    max_turn_text_chars: int
    max_pending_text_chars: int
    max_pending_audio_ms: int
    max_messages_per_second: int
    max_sessions: int
    idle_timeout_s: float
    max_turn_seconds: float
    max_contexts: int | None = None
    """Contexts one socket may hold open (servers since contexts say)."""
    context_idle_s: float | None = None
    """A context with nothing to speak and no message for this long is closed."""


class SessionCreated(_Event):
    type: Literal["session_created"] = "session_created"
    session_id: str
    protocol: int = PROTOCOL_VERSION
    audio: AudioFormat
    limits: Limits
    voices: list[str] | None = None
    """The voices ``session_update`` may choose, the server's default first."""


class SessionUpdated(_Event):
    """Acknowledges a ``session_update`` with the settings now in force."""

    type: Literal["session_updated"] = "session_updated"
    audio: AudioFormat
    """The format of every turn started after this event."""
    speed: float
    """The speaking rate of every segment synthesized after this event."""
    normalization: Literal["auto", "off"] | None = None
    """How the text of every segment cut after this event is read (servers since
    normalization always say)."""
    locale: Literal["en-US", "en-GB"] | None = None
    voice: str | None = None
    """The voice of every segment synthesized after this event (one of ``voices``)."""
    live_turn_id: str | None = None
    """The turn live when the update came, if any: it keeps the format it started with."""
    context_idle_s: float | None = None
    """Where the update set it: how long a context may sit idle before it is closed."""


class TurnStarted(_Event):
    """Acknowledges a ``turn_reset`` at once (after the cut turn's ``turn_done``, if any)."""

    type: Literal["turn_started"] = "turn_started"
    turn_id: str
    context_id: str | None = None
    """The context the turn speaks in; left out for the unnamed one (as on every event)."""


class ReplyDelta(_Event):
    """Agent mode: the reply's text as the language model generates it (before it is heard)."""

    type: Literal["reply_delta"] = "reply_delta"
    turn_id: str
    text: str


class Pong(_Event):
    type: Literal["pong"] = "pong"
    id: str | None = None


class SegmentStarted(_Event):
    """A piece of text starts being spoken at ``start_sample`` of its turn."""

    type: Literal["segment"] = "segment"
    turn_id: str
    text: str
    start_sample: int
    spoken: str | None = None
    """What was synthesized for ``text``, where normalization read it otherwise ("$5" ->
    "five dollars"); ``text``, word marks and ``heard_text`` stay the client's own."""
    context_id: str | None = None


class WordMark(_Event):
    text: str
    start_sample: int


class Words(_Event):
    """Where each word of a ``segment`` starts, for engines that know phoneme durations.

    Sent once the segment is synthesized (usually long before it plays), after its ``segment``
    event; ``words`` joined by spaces is the segment's text.
    """

    type: Literal["words"] = "words"
    turn_id: str
    words: list[WordMark]
    context_id: str | None = None


class TurnDone(_Event):
    """Sent after the turn's last audio frame; ``samples`` is the audio sent for the turn.

    A cancelled turn carries ``heard_text``: the text that had started playing (by the
    client's last ``playback`` report, else by the audio sent), word by word where the engine
    gave word timings, else segment by segment.
    """

    type: Literal["turn_done"] = "turn_done"
    turn_id: str
    samples: int
    cancelled: bool
    heard_text: str | None = None
    context_id: str | None = None


class Error(_Event):
    """A refusal; ``code`` is one of :class:`ErrorCode`, and later versions may add codes."""

    type: Literal["error"] = "error"
    code: str = Field(json_schema_extra={"examples": [c.value for c in SESSION_CODES]})
    message: str
    turn_id: str | None = None
    context_id: str | None = None
    """The context the refused message named, if any."""


class ContextClosed(_Event):
    """A context is gone, its queued audio dropped: ``closed`` by the client's
    ``close_context``, or ``idle_timeout`` (nothing to speak and no message for
    ``context_idle_s``)."""

    type: Literal["context_closed"] = "context_closed"
    context_id: str
    reason: Literal["closed", "idle_timeout"]


ServerMessage = (
    SessionCreated
    | SessionUpdated
    | TurnStarted
    | ReplyDelta
    | SegmentStarted
    | Words
    | TurnDone
    | Error
    | Pong
    | ContextClosed
)
ServerEvent = Annotated[ServerMessage, Field(discriminator="type")]
SERVER_TYPES = (
    "session_created", "session_updated", "turn_started", "reply_delta", "segment", "words",
    "turn_done", "error", "pong", "context_closed",
)  # fmt: skip
server_adapter: TypeAdapter[ServerEvent] = TypeAdapter(ServerEvent)


def encode_event(event: BaseModel) -> str:
    return event.model_dump_json(exclude_none=True)


def parse_server_event(data: str) -> ServerEvent | None:
    """A server event, or None for an event type this client does not know (newer server)."""
    obj = json.loads(data)
    if obj.get("type") not in SERVER_TYPES:
        return None
    return server_adapter.validate_python(obj)
