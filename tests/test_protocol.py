from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest

from voicews.errors import ErrorCode, VoicewsError
from voicews.protocol import (
    AudioFrame,
    EndText,
    SessionUpdate,
    TextDelta,
    TurnDone,
    TurnReset,
    decode_frame,
    encode_frame,
    json_schemas,
    parse_client_message,
    parse_server_event,
)

SCHEMA_DIR = Path(__file__).parent.parent / "protocol" / "schema"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ('{"type": "turn_reset", "turn_id": "t1"}', TurnReset(turn_id="t1")),
        ('{"type": "text_delta", "text": "Hel"}', TextDelta(text="Hel")),
        ('{"type": "text_delta", "text": ""}', TextDelta(text="")),
        ('{"type": "end_text"}', EndText()),
        ('{"type": "session_update", "speed": 1.25}', SessionUpdate(speed=1.25)),
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
        # valid JSON, but no text: it could be neither phonemized nor echoed in an event
        ('{"type": "text_delta", "text": "a\\ud800b"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "turn_reset", "turn_id": "\\udfff"}', ErrorCode.INVALID_MESSAGE),
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


def test_audio_frame_is_a_msgpack_map_with_raw_pcm() -> None:
    frame = AudioFrame(turn_id="t1", seq=3, start_sample=2646, pcm=b"\x01\x00\xff\x7f")
    data = encode_frame(frame)
    assert msgpack.unpackb(data) == {
        "turn_id": "t1",
        "seq": 3,
        "start_sample": 2646,
        "pcm": b"\x01\x00\xff\x7f",
    }
    assert decode_frame(data) == frame
    assert frame.samples == 2


def test_schemas_require_type_and_leave_server_events_open() -> None:
    schemas = json_schemas()
    client = schemas["client_message.schema.json"]["$defs"]
    assert all(d["required"][0] == "type" for d in client.values())
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
