"""The golden examples in protocol/examples/, checked from the server's end and the client's.

The web client's tests load the same files (clients/web/test/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import timeout
from voicews.audio import to_pcm16
from voicews.client import RealtimeClient
from voicews.encoding import OpusDecoder, decode_pcm
from voicews.errors import ErrorCode, VoicewsError
from voicews.protocol import (
    ENCODINGS,
    Encoding,
    Error,
    Pong,
    decode_frame,
    encode_frame,
    parse_client_message,
    parse_server_event,
)

EXAMPLES = Path(__file__).parent.parent / "protocol" / "examples"
CLIENT = json.loads((EXAMPLES / "client_messages.json").read_text())
SERVER = json.loads((EXAMPLES / "server_events.json").read_text())
FRAMES = json.loads((EXAMPLES / "frames.json").read_text())["frames"]
REFUSED_AS_MALFORMED = {ErrorCode.INVALID_JSON, ErrorCode.INVALID_MESSAGE, ErrorCode.UNKNOWN_TYPE}


def names(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


@pytest.mark.parametrize("case", CLIENT["valid"], ids=names(CLIENT["valid"]))
def test_valid_client_messages_parse(case: dict[str, Any]) -> None:
    assert parse_client_message(case["frame"]).type == json.loads(case["frame"])["type"]


@pytest.mark.parametrize("case", CLIENT["invalid"], ids=names(CLIENT["invalid"]))
def test_invalid_client_messages_get_their_code(case: dict[str, Any]) -> None:
    with pytest.raises(VoicewsError) as refused:
        parse_client_message(case["frame"])
    assert refused.value.code == case["code"]


async def test_live_server_answers_the_examples(client: RealtimeClient) -> None:
    """Every invalid example gets exactly its error; no valid one is refused as malformed."""
    for case in CLIENT["invalid"]:
        await client.ws.send(case["frame"])
        await client.ws.send('{"type": "ping", "id": "sync"}')
        got = [await client.recv(timeout(5)), await client.recv(timeout(5))]
        assert isinstance(got[0], Error) and got[0].code == case["code"], case["name"]
        assert got[1] == Pong(id="sync")
    await client.ws.send(bytes.fromhex(CLIENT["binary"]["frame_hex"]))
    refused = await client.recv(timeout(5))
    assert isinstance(refused, Error) and refused.code == CLIENT["binary"]["code"]
    await client.turn_reset("golden")
    for case in CLIENT["valid"]:
        if json.loads(case["frame"])["type"] != "turn_reset":
            await client.ws.send(case["frame"])
    await client.ws.send('{"type": "ping", "id": "done"}')
    while (item := await client.recv(timeout(20))) != Pong(id="done"):
        if isinstance(item, Error):
            assert item.code not in REFUSED_AS_MALFORMED, item


@pytest.mark.parametrize("event", SERVER["events"], ids=lambda e: e["type"])
def test_server_events_parse_and_round_trip(event: dict[str, Any]) -> None:
    parsed = parse_server_event(json.dumps(event))
    assert parsed is not None
    assert parsed.model_dump(exclude_none=True) == event


def test_events_from_a_newer_server_are_tolerated() -> None:
    extended, unknown = SERVER["from_a_newer_server"]
    done = parse_server_event(json.dumps(extended))
    assert done is not None and done.type == "turn_done"
    assert parse_server_event(json.dumps(unknown)) is None


def decoded_values(pcm: bytes, encoding: Encoding) -> list[float] | list[int]:
    """A frame's samples as frames.json lists them: floats for pcm_f32le, else 16-bit."""
    if encoding == "pcm_s16le":
        return np.frombuffer(pcm, dtype="<i2").tolist()
    audio = decode_pcm(pcm, encoding)
    if encoding == "pcm_f32le":
        return audio.tolist()
    return np.frombuffer(to_pcm16(audio), dtype="<i2").tolist()


@pytest.mark.parametrize("golden", FRAMES, ids=lambda f: f["file"])
def test_audio_frames_decode_and_encode_byte_for_byte(golden: dict[str, Any]) -> None:
    data = (EXAMPLES / golden["file"]).read_bytes()
    frame = decode_frame(data)
    assert (frame.turn_id, frame.seq, frame.start_sample, frame.samples) == (
        golden["turn_id"], golden["seq"], golden["start_sample"], golden["samples"],
    )  # fmt: skip
    if golden["format"] == "opus":
        assert OpusDecoder().decode(frame.pcm).size == golden["samples"]
    else:
        assert decoded_values(frame.pcm, golden["format"]) == golden["values"]
    assert encode_frame(frame) == data


def test_every_format_has_a_golden_frame() -> None:
    assert {golden["format"] for golden in FRAMES} == set(ENCODINGS)
