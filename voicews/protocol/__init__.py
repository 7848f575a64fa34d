"""The wire contract of the realtime dialect, version 1 (see ``protocol/PROTOCOL.md``).

Split by direction: ``client`` (what a client may send, and the parser that refuses anything
else), ``events`` (what the server sends), ``frames`` (the binary audio frame). Pydantic lives
here, at the edge; the session core behind it never sees these models.
``python -m voicews.protocol DIR`` writes the JSON Schemas.
"""

from ..core.events import AudioFrame
from ..encoding import ENCODINGS, OPUS_RATE, Encoding
from .client import (
    CLIENT_TYPES,
    MAX_JSON_DEPTH,
    SAMPLE_RATES,
    AudioUpdate,
    Cancel,
    ClientMessage,
    CloseContext,
    EndText,
    Ping,
    Playback,
    SampleRate,
    SessionUpdate,
    TextDelta,
    TurnReset,
    UserMessage,
    parse_audio_query,
    parse_client_message,
    too_deep,
)
from .events import (
    PROTOCOL_VERSION,
    SERVER_TYPES,
    AudioFormat,
    ContextClosed,
    Error,
    Limits,
    Pong,
    ReplyDelta,
    SegmentStarted,
    ServerEvent,
    ServerMessage,
    SessionCreated,
    SessionUpdated,
    TurnDone,
    TurnStarted,
    WordMark,
    Words,
    encode_event,
    parse_server_event,
)
from .frames import decode_frame, encode_frame
from .schema import json_schemas, write_schemas

REALTIME_PATH = "/v1/realtime"

__all__ = [
    "CLIENT_TYPES", "ENCODINGS", "MAX_JSON_DEPTH", "OPUS_RATE", "PROTOCOL_VERSION", "REALTIME_PATH",
    "SAMPLE_RATES", "SERVER_TYPES", "AudioFormat", "AudioFrame", "AudioUpdate", "Cancel",
    "ClientMessage", "CloseContext", "ContextClosed", "Encoding", "EndText", "Error", "Limits",
    "Ping", "Playback", "Pong",
    "ReplyDelta", "SampleRate", "SegmentStarted", "ServerEvent", "ServerMessage",
    "SessionCreated", "SessionUpdate", "SessionUpdated", "TextDelta", "TurnDone", "TurnReset",
    "TurnStarted", "UserMessage", "WordMark", "Words", "decode_frame", "encode_event",
    "encode_frame", "json_schemas", "parse_audio_query", "parse_client_message",
    "parse_server_event", "too_deep", "write_schemas",
]  # fmt: skip
