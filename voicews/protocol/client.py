"""Client -> server messages of protocol v1: strict models, and the one parser that
refuses anything else with a precise error code."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, get_args
from urllib.parse import parse_qs

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from ..encoding import OPUS_RATE, Encoding
from ..errors import ErrorCode, VoicewsError

TurnId = Annotated[str, Field(min_length=1, max_length=128)]
ContextId = Annotated[str, Field(min_length=1, max_length=128)]
LexiconWord = Annotated[str, Field(min_length=1, max_length=64)]
LexiconSpoken = Annotated[str, Field(min_length=1, max_length=256)]
_Rates = Literal[8000, 16000, 22050, 24000, 44100, 48000]
SAMPLE_RATES: tuple[int, ...] = get_args(_Rates)


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


class TurnReset(_Message):
    """Start a turn; a turn still speaking is cut at once (barge-in)."""

    type: Literal["turn_reset"] = "turn_reset"
    turn_id: TurnId
    context_id: ContextId | None = None
    """The context the turn speaks in, opened by it if new; left out, the unnamed one."""


class TextDelta(_Message):
    """Append text to the current turn; deltas may split anywhere, even inside a word."""

    type: Literal["text_delta"] = "text_delta"
    text: str
    context_id: ContextId | None = None


class EndText(_Message):
    """No more text for the current turn: speak the rest, then ``turn_done``."""

    type: Literal["end_text"] = "end_text"
    context_id: ContextId | None = None


class CloseContext(_Message):
    """Close a context at once: its live turn is cut, its queued audio dropped, then
    ``context_closed``."""

    type: Literal["close_context"] = "close_context"
    context_id: ContextId


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
    normalization: Literal["auto", "off"] | None = None
    """``auto`` (the default): numbers, dates, money, units, codes and abbreviations read the
    way a person would say them; ``off``: the text as written."""
    locale: Literal["en-US", "en-GB"] | None = None
    """The reading's conventions (dates, money, ``and`` in numbers)."""
    lexicon: dict[LexiconWord, LexiconSpoken] | None = Field(default=None, max_length=1000)
    """Words to read your way (``{"Nguyen": "win"}``), over the server's ``--lexicon``; an
    update replaces the session's earlier ones."""
    context_idle_s: float | None = Field(default=None, ge=5, le=180)
    """How long a context with nothing to speak and no message may sit before it is closed."""

    @model_validator(mode="after")
    def _lexicon_words_are_tokens(self) -> SessionUpdate:
        for word in self.lexicon or ():
            if any(char.isspace() for char in word):
                raise ValueError(f"lexicon: {word!r} is not one word (no whitespace)")
        return self


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
    TurnReset
    | TextDelta
    | EndText
    | CloseContext
    | Cancel
    | SessionUpdate
    | UserMessage
    | Playback
    | Ping,
    Field(discriminator="type"),
]
CLIENT_TYPES = (
    "turn_reset", "text_delta", "end_text", "close_context", "cancel", "session_update",
    "user_message", "playback", "ping",
)  # fmt: skip
client_adapter: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


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
        return client_adapter.validate_python(obj)
    except ValidationError as exc:
        raise VoicewsError(ErrorCode.INVALID_MESSAGE, _describe(exc)) from None


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
