from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest

from voicews.errors import ErrorCode, VoicewsError
from voicews.protocol import (
    CLIENT_TYPES,
    ENCODINGS,
    SAMPLE_RATES,
    AudioFrame,
    AudioUpdate,
    CloseContext,
    EndText,
    SessionUpdate,
    TextDelta,
    TurnDone,
    TurnReset,
    decode_frame,
    encode_frame,
    json_schemas,
    parse_audio_query,
    parse_client_message,
    parse_server_event,
    too_deep,
)

SCHEMA_DIR = Path(__file__).parent.parent / "protocol" / "schema"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ('{"type": "turn_reset", "turn_id": "t1"}', TurnReset(turn_id="t1")),
        ('{"type": "text_delta", "text": "Hel"}', TextDelta(text="Hel")),
        ('{"type": "text_delta", "text": ""}', TextDelta(text="")),
        ('{"type": "end_text"}', EndText()),
        (
            '{"type": "turn_reset", "turn_id": "t1", "context_id": "c1"}',
            TurnReset(turn_id="t1", context_id="c1"),
        ),
        (
            '{"type": "text_delta", "text": "Hi", "context_id": "c1"}',
            TextDelta(text="Hi", context_id="c1"),
        ),
        ('{"type": "end_text", "context_id": "c1"}', EndText(context_id="c1")),
        ('{"type": "close_context", "context_id": "c1"}', CloseContext(context_id="c1")),
        ('{"type": "session_update", "context_idle_s": 5}', SessionUpdate(context_idle_s=5)),
        ('{"type": "session_update", "speed": 1.25}', SessionUpdate(speed=1.25)),
        ('{"type": "session_update", "speed": 0.25}', SessionUpdate(speed=0.25)),
        ('{"type": "session_update", "speed": 4}', SessionUpdate(speed=4.0)),
        (
            '{"type": "session_update", "audio": {"sample_rate": 8000, "format": "pcm_mulaw"}}',
            SessionUpdate(audio=AudioUpdate(sample_rate=8000, format="pcm_mulaw")),
        ),
        (
            '{"type": "session_update", "audio": {"format": "opus"}}',
            SessionUpdate(audio=AudioUpdate(format="opus")),
        ),
    ],
)
def test_valid_client_messages(data: str, expected: object) -> None:
    assert parse_client_message(data) == expected


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x00\x01", ErrorCode.BINARY_NOT_SUPPORTED),
        ("{not json", ErrorCode.INVALID_JSON),
        ("[1, 2]", ErrorCode.INVALID_MESSAGE),
        ('"text"', ErrorCode.INVALID_MESSAGE),
        ('{"text": "no type"}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "speak"}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": 5}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "turn_reset"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "turn_reset", "turn_id": ""}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "turn_reset", "turn_id": 7}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "text_delta"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "text_delta", "text": 42}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "text_delta", "text": "a", "extra": 1}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "speed": 9}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "speed": "fast"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "speed": "1.5"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "speed": true}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "voice": ""}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "close_context"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "text_delta", "text": "a", "context_id": ""}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "context_idle_s": 4}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "context_idle_s": 181}', ErrorCode.INVALID_MESSAGE),
        # valid JSON, but no text: it could be neither phonemized nor echoed in an event
        ('{"type": "text_delta", "text": "a\\ud800b"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "turn_reset", "turn_id": "\\udfff"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "speed": 4.5}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "speed": 0.2}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "audio": {"sample_rate": 11025}}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "audio": {"sample_rate": 8000.0}}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "audio": {"sample_rate": "8000"}}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "audio": {"format": "mp3"}}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "session_update", "audio": {"channels": 2}}', ErrorCode.INVALID_MESSAGE),
        (
            '{"type": "session_update", "audio": {"format": "opus", "sample_rate": 8000}}',
            ErrorCode.INVALID_MESSAGE,
        ),
    ],
)
def test_invalid_client_messages_get_precise_codes(data: str | bytes, code: ErrorCode) -> None:
    with pytest.raises(VoicewsError) as info:
        parse_client_message(data)
    assert info.value.code is code
    assert info.value.message


def test_validation_message_names_the_field() -> None:
    with pytest.raises(VoicewsError) as info:
        parse_client_message('{"type": "session_update", "speed": 9}')
    assert "speed" in info.value.message


@pytest.mark.parametrize(
    ("message", "mentions"),
    [
        ('{"type": "session_update", "audio": {"sample_rate": 11025}}', "audio.sample_rate"),
        ('{"type": "session_update", "audio": {"sample_rate": "8k"}}', "audio.sample_rate"),
        ('{"type": "session_update", "audio": {"format": "mp3"}}', "audio.format"),
    ],
)
def test_audio_refusals_name_the_field_and_the_allowed_values(message: str, mentions: str) -> None:
    with pytest.raises(VoicewsError) as info:
        parse_client_message(message)
    assert mentions in info.value.message
    allowed = SAMPLE_RATES if "sample_rate" in mentions else ENCODINGS
    assert all(str(value) in info.value.message for value in allowed), info.value.message


def test_audio_query_parameters() -> None:
    assert parse_audio_query(b"token=x&sample_rate=8000&format=pcm_mulaw") == AudioUpdate(
        sample_rate=8000, format="pcm_mulaw"
    )
    assert parse_audio_query(b"") == AudioUpdate()
    for query, field in [
        (b"sample_rate=44000", "sample_rate"),
        (b"sample_rate=fast", "sample_rate"),
        (b"format=ulaw", "format"),
        (b"format=opus&sample_rate=8000", "opus"),
    ]:
        with pytest.raises(VoicewsError) as info:
            parse_audio_query(query)
        assert info.value.code is ErrorCode.INVALID_REQUEST and field in info.value.message


def test_audio_frame_is_a_msgpack_map_with_its_sample_count() -> None:
    frame = AudioFrame(turn_id="t1", seq=3, start_sample=2646, pcm=b"\x01\x00\xff\x7f", samples=2)
    data = encode_frame(frame)
    assert msgpack.unpackb(data) == {
        "turn_id": "t1",
        "seq": 3,
        "start_sample": 2646,
        "samples": 2,
        "pcm": b"\x01\x00\xff\x7f",
    }
    assert decode_frame(data) == frame
    mulaw = AudioFrame(turn_id="t1", seq=0, start_sample=0, pcm=b"\xff\x80\x00", samples=3)
    assert decode_frame(encode_frame(mulaw)) == mulaw


def test_frames_name_their_context_only_when_there_is_one() -> None:
    plain = AudioFrame("t1", 0, 0, b"\x00" * 4, 2)
    assert "context_id" not in msgpack.unpackb(encode_frame(plain))
    named = AudioFrame("t1", 0, 0, b"\x00" * 4, 2, "c1")
    assert msgpack.unpackb(encode_frame(named))["context_id"] == "c1"
    assert decode_frame(encode_frame(named)) == named


def test_frames_of_an_earlier_server_count_pcm16_samples() -> None:
    """Servers before output formats sent no ``samples``: their frames are always PCM16."""
    old = msgpack.packb({"turn_id": "t1", "seq": 0, "start_sample": 0, "pcm": b"\x00" * 8})
    assert decode_frame(old).samples == 4


def test_schemas_require_type_and_leave_server_events_open() -> None:
    schemas = json_schemas()
    client = schemas["client_message.schema.json"]["$defs"]
    messages = [d for d in client.values() if "type" in d["properties"]]
    assert len(messages) == len(CLIENT_TYPES) and all(d["required"][0] == "type" for d in messages)
    assert all(d.get("additionalProperties") is False for d in client.values())
    server = schemas["server_event.schema.json"]["$defs"]
    assert "type" in server["TurnDone"]["required"]
    assert all("additionalProperties" not in d for d in server.values())


def test_clients_skip_event_types_from_newer_servers() -> None:
    assert parse_server_event('{"type": "word_timing", "turn_id": "t1"}') is None
    done = parse_server_event(
        '{"type": "turn_done", "turn_id": "t1", "samples": 5, "cancelled": false, "new": 1}'
    )
    assert done == TurnDone(turn_id="t1", samples=5, cancelled=False)


def test_committed_json_schemas_match_the_models() -> None:
    """Regenerate with: python -m voicews.protocol protocol/schema"""
    for name, schema in json_schemas().items():
        committed = json.loads((SCHEMA_DIR / name).read_text())
        assert committed == schema, f"{name} drifted; regenerate it"


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[" * 8 + "]" * 8, False),
        ("[" * 9 + "]" * 9, True),
        ('{"a": {"b": [{"c": [[[[1]]]]}]}}', False),  # eight levels
        ('{"a": {"b": [{"c": [[[[[1]]]]]}]}}', True),
        ('{"type": "text_delta", "text": "[[[[[[[[[[[[{{{{{{{{"}', False),  # in a string
        ('{"text": "\\"[[[[[[[[[[[[\\\\"}', False),  # escaped quotes stay in the string
        ("[" * 30_000, False),  # unbalanced: the parser says what is wrong
        ("[]" * 30_000, False),  # wide, not deep
    ],
)
def test_nesting_depth_is_measured_before_parsing(text: str, deep: bool) -> None:
    assert too_deep(text) is deep


@pytest.mark.parametrize("depth", [9, 990, 30_000])
def test_deep_json_is_an_invalid_message_not_a_crash(depth: int) -> None:
    message = '{"type": "text_delta", "text": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(VoicewsError) as refused:
        parse_client_message(message)
    assert refused.value.code == ErrorCode.INVALID_MESSAGE
