"""The wire contract, version 1: pydantic models for JSON messages and the binary frame codec.

Pydantic lives here, at the edge; the session and everything behind it see these models only
as already validated values. ``python -m voicews.protocol DIR`` writes the JSON Schemas.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import parse_qs

import msgpack
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from .errors import SESSION_CODES, ErrorCode, VoicewsError

PROTOCOL_VERSION = 1
REALTIME_PATH = "/v1/realtime"

TurnId = Annotated[str, Field(min_length=1, max_length=128)]
Encoding = Literal["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw", "opus"]
"""How audio frames encode samples: PCM16 (the default), float32, G.711 mu-law or A-law (one
byte per sample), or Opus (one 20 ms packet per frame, 48 kHz)."""
ENCODINGS: tuple[str, ...] = get_args(Encoding)
_Rates = Literal[8000, 16000, 22050, 24000, 44100, 48000]
SAMPLE_RATES: tuple[int, ...] = get_args(_Rates)
OPUS_RATE = 48_000


def _integer(value: object) -> object:
    """Literal matching compares by equality, so 8000.0 would pass: only integers do."""
    if isinstance(value, bool) or not isinstance(value, int):
        allowed = ", ".join(map(str, SAMPLE_RATES[:-1])) + f" or {SAMPLE_RATES[-1]}"
        raise ValueError(f"Input should be an integer: {allowed}")
    return value


SampleRate = Annotated[_Rates, BeforeValidator(_integer)]


def _require_type(schema: dict[str, Any]) -> None:
    required = schema.setdefault("required", [])
    if "type" not in required:
        required.insert(0, "type")


class _Message(BaseModel):
    """Client messages: strict, so nothing a client sends is silently coerced or ignored."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, json_schema_extra=_require_type
    )


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


# --- client -> server -------------------------------------------------------------------


class TurnReset(_Message):
    """Start a turn; a turn still speaking is cut at once (barge-in)."""

    type: Literal["turn_reset"] = "turn_reset"
    turn_id: TurnId


class TextDelta(_Message):
    """Append text to the current turn; deltas may split anywhere, even inside a word."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class EndText(_Message):
    """No more text for the current turn: speak the rest, then ``turn_done``."""

    type: Literal["end_text"] = "end_text"


class AudioUpdate(BaseModel):
    """The output format of turns started from now on; a field left out keeps its value."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    sample_rate: SampleRate | None = None
    format: Encoding | None = None

    @model_validator(mode="after")
    def _opus_is_48k(self) -> AudioUpdate:
        if self.format == "opus" and self.sample_rate not in (None, OPUS_RATE):
            raise ValueError(f"format opus is sample_rate {OPUS_RATE} only")
        return self


class SessionUpdate(_Message):
    """Change voice options, from the next segment synthesized, and the audio format, from
    the next turn; acknowledged with ``session_updated``."""

    type: Literal["session_update"] = "session_update"
    speed: float | None = Field(default=None, ge=0.25, le=4.0)
    voice: str | None = Field(default=None, min_length=1, max_length=128)
    """One of the voices ``session_created`` lists."""
    chunk_frames: int | None = Field(default=None, ge=4, le=2000)
    """Engines that decode in windows (mlx-piper): latent frames per window."""
    overlap_frames: int | None = Field(default=None, ge=0, le=64)
    """Engines that decode in windows: frames of context shared by adjacent windows."""
    audio: AudioUpdate | None = None


class Cancel(_Message):
    """Stop the live turn at once (as a barge-in does) without starting another."""

    type: Literal["cancel"] = "cancel"


class UserMessage(_Message):
    """Agent mode: the user's words; the server generates the reply and speaks it as a turn
    (a barge-in on any turn still speaking)."""

    type: Literal["user_message"] = "user_message"
    text: str = Field(min_length=1)
    turn_id: TurnId | None = None


class Playback(_Message):
    """Where the client's player is in a turn, so a cut turn can report what was heard."""

    type: Literal["playback"] = "playback"
    turn_id: TurnId
    samples_played: int = Field(ge=0)


class Ping(_Message):
    """Liveness and latency probe; answered with a ``pong`` carrying the same ``id``."""

    type: Literal["ping"] = "ping"
    id: str | None = Field(default=None, max_length=128)


ClientMessage = Annotated[
    TurnReset | TextDelta | EndText | Cancel | SessionUpdate | UserMessage | Playback | Ping,
    Field(discriminator="type"),
]
CLIENT_TYPES = (
    "turn_reset", "text_delta", "end_text", "cancel", "session_update", "user_message",
    "playback", "ping",
)  # fmt: skip
_client_adapter: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


# --- server -> client -------------------------------------------------------------------


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
    voice: str | None = None
    """The voice of every segment synthesized after this event (one of ``voices``)."""
    live_turn_id: str | None = None
    """The turn live when the update came, if any: it keeps the format it started with."""


class TurnStarted(_Event):
    """Acknowledges a ``turn_reset`` at once (after the cut turn's ``turn_done``, if any)."""

    type: Literal["turn_started"] = "turn_started"
    turn_id: str


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


class Error(_Event):
    """A refusal; ``code`` is one of :class:`ErrorCode`, and later versions may add codes."""

    type: Literal["error"] = "error"
    code: str = Field(json_schema_extra={"examples": [c.value for c in SESSION_CODES]})
    message: str
    turn_id: str | None = None


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
)
ServerEvent = Annotated[ServerMessage, Field(discriminator="type")]
SERVER_TYPES = (
    "session_created", "session_updated", "turn_started", "reply_delta", "segment", "words",
    "turn_done", "error", "pong",
)  # fmt: skip
_server_adapter: TypeAdapter[ServerEvent] = TypeAdapter(ServerEvent)


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """One binary frame: ``pcm`` in the turn's format, ``samples`` what it decodes to, and
    ``start_sample`` where it starts in the turn, both at the turn's output rate."""

    turn_id: str
    seq: int
    start_sample: int
    pcm: bytes
    samples: int


# --- codecs -----------------------------------------------------------------------------


MAX_JSON_DEPTH = 8
"""Deepest nesting of arrays and objects a client message may have; every message is a flat
object, and a deep document would exhaust the parser's recursion before it could be refused."""
_STRING = re.compile(r'"[^"]*"')  # once escapes are gone: linear, no backtracking
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays and objects deeper than ``limit``, decided without
    parsing it, in a few passes of C-speed string operations.

    Escapes are dropped, then strings, then everything but brackets; each pass then removes
    the innermost pairs, one level of the deepest chain. Unbalanced text is left to the
    parser to describe.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    plain = text.replace("\\\\", "").replace('\\"', "")
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", plain))
    for _ in range(limit):
        inner = _INNERMOST.sub("", skeleton)
        if inner == skeleton:
            return False  # unbalanced: not JSON at all
        skeleton = inner
    return bool(skeleton) and _INNERMOST.search(skeleton) is not None


def parse_client_message(data: str | bytes) -> ClientMessage:
    """Validate one client frame, raising :class:`VoicewsError` with the precise code."""
    if isinstance(data, bytes):
        raise VoicewsError(
            ErrorCode.BINARY_NOT_SUPPORTED, "binary frames are not accepted; send JSON text"
        )
    if too_deep(data):
        raise VoicewsError(
            ErrorCode.INVALID_MESSAGE,
            f"JSON nested deeper than {MAX_JSON_DEPTH} levels; a message is a flat object",
        )
    try:
        obj = json.loads(data)
        if "\\u" in data:  # an escaped unpaired surrogate is JSON, but no text: refuse it here
            json.dumps(obj, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise VoicewsError(
            ErrorCode.INVALID_MESSAGE, "an unpaired UTF-16 surrogate (\\uD800-\\uDFFF) is not text"
        ) from None
    except ValueError as exc:
        raise VoicewsError(ErrorCode.INVALID_JSON, f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise VoicewsError(ErrorCode.INVALID_MESSAGE, "a message must be a JSON object")
    kind = obj.get("type")
    if kind not in CLIENT_TYPES:
        raise VoicewsError(
            ErrorCode.UNKNOWN_TYPE,
            f"unknown message type {kind!r}; expected one of {', '.join(CLIENT_TYPES)}",
        )
    try:
        return _client_adapter.validate_python(obj)
    except ValidationError as exc:
        raise VoicewsError(ErrorCode.INVALID_MESSAGE, _describe(exc)) from None


def unknown_voice(
    voice: str, voices: Sequence[str], code: ErrorCode = ErrorCode.INVALID_MESSAGE
) -> VoicewsError:
    """The refusal of a voice the server does not have, naming those it has."""
    choices = ", ".join(voices)
    return VoicewsError(code, f"voice: unknown voice {voice!r}; choose from {choices}")


def _describe(exc: ValidationError, skip: int = 1, whole: str = "message") -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"][skip:]) or whole
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def parse_audio_query(query: bytes) -> AudioUpdate:
    """``?sample_rate=N&format=F`` of the realtime URL (other parameters are not ours); a bad
    value refuses the handshake with ``invalid_request`` (HTTP 400)."""
    fields: dict[str, Any] = {}
    for name, values in parse_qs(query.decode("latin-1")).items():
        if name in AudioUpdate.model_fields:
            fields[name] = values[-1]
    rate = fields.get("sample_rate", "")
    if rate.isdigit():  # otherwise left a string, and the model names the allowed values
        fields["sample_rate"] = int(rate)
    try:
        return AudioUpdate.model_validate(fields)
    except ValidationError as exc:
        raise VoicewsError(ErrorCode.INVALID_REQUEST, _describe(exc, 0, "query")) from None


def encode_event(event: BaseModel) -> str:
    return event.model_dump_json(exclude_none=True)


def parse_server_event(data: str) -> ServerEvent | None:
    """A server event, or None for an event type this client does not know (newer server)."""
    obj = json.loads(data)
    if obj.get("type") not in SERVER_TYPES:
        return None
    return _server_adapter.validate_python(obj)


def encode_frame(frame: AudioFrame) -> bytes:
    data: bytes = msgpack.packb(
        {
            "turn_id": frame.turn_id,
            "seq": frame.seq,
            "start_sample": frame.start_sample,
            "samples": frame.samples,
            "pcm": frame.pcm,
        },
        use_bin_type=True,
    )
    return data


def decode_frame(data: bytes) -> AudioFrame:
    obj: Any = msgpack.unpackb(data, raw=False)
    pcm = obj["pcm"]
    # Frames from servers before output formats carry no "samples": they are always PCM16.
    samples = obj["samples"] if "samples" in obj else len(pcm) // 2
    return AudioFrame(obj["turn_id"], obj["seq"], obj["start_sample"], pcm, samples)


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schemas of both directions, as committed under ``protocol/schema/``."""
    return {
        "client_message.schema.json": _client_adapter.json_schema(),
        "server_event.schema.json": _server_adapter.json_schema(mode="serialization"),
    }


def write_schemas(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, schema in json_schemas().items():
        (directory / name).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "protocol/schema"))
