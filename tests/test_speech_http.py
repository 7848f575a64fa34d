"""``POST /v1/audio/speech``: OpenAI-compatible, streamed as it is synthesized."""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave

import av
import openai

from conftest import timeout
from voicews.encoding import RESPONSE_FORMATS
from voicews.server import VoicewsServer

TEXT = " ".join(
    f"Paragraph {i} of the answer goes on, clause after clause, to make a long reading."
    for i in range(8)
)


async def post(
    port: int, body: bytes, path: str = "/v1/audio/speech"
) -> tuple[int, dict[str, str], asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) != b"\r\n":
        key, _, value = line.decode().partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers, reader, writer


async def chunks(reader: asyncio.StreamReader) -> list[tuple[float, bytes]]:
    """The chunked body, each chunk with the time it arrived."""
    out = []
    while True:
        size = int((await asyncio.wait_for(reader.readline(), timeout(30))).strip(), 16)
        if size == 0:
            return out
        data = await reader.readexactly(size)
        await reader.readline()
        out.append((time.perf_counter(), data))


async def test_wav_streams_before_the_text_is_all_synthesized(server: VoicewsServer) -> None:
    body = json.dumps(
        {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "wav"}
    ).encode()
    jobs_before = server.worker.stats.jobs_done
    status, headers, reader, writer = await post(server.port, body)
    assert status == 200
    assert headers["content-type"] == "audio/wav"
    assert headers["x-voicews-streamed"] == "true"
    received = []
    jobs_at_first_audio = None
    while True:
        size = int((await asyncio.wait_for(reader.readline(), timeout(30))).strip(), 16)
        if size == 0:
            break
        received.append(await reader.readexactly(size))
        await reader.readline()
        if jobs_at_first_audio is None and sum(map(len, received)) > 44:
            jobs_at_first_audio = server.worker.stats.jobs_done - jobs_before
    writer.close()
    jobs_total = server.worker.stats.jobs_done - jobs_before
    assert jobs_at_first_audio is not None and jobs_at_first_audio < jobs_total - 3
    with wave.open(io.BytesIO(b"".join(received))) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (22050, 1, 2)
        frames = wav.readframes(10**9)
    assert len(frames) / 2 / 22050 > 20  # the whole text was spoken


async def test_pcm_is_24_khz_and_speed_spans_openais_range(server: VoicewsServer) -> None:
    """OpenAI's pcm is 24 kHz, and clients play it so; speed goes from 0.25 to 4.0. Piper
    cannot go all the way: a phoneme lasts at least a frame, so 4.0 is about 2x faster and
    0.25 about 3x slower here."""
    seconds = {}
    for speed in (0.25, 1.0, 1.5, 4.0):
        body = json.dumps({"input": "Hello there, a quick test.", "response_format": "pcm",
                           "speed": speed}).encode()  # fmt: skip
        status, headers, reader, writer = await post(server.port, body)
        assert status == 200
        assert headers["content-type"] == "audio/pcm;rate=24000;channels=1;encoding=s16le"
        assert headers["x-voicews-sample-rate"] == "24000"
        seconds[speed] = sum(len(d) for _, d in await chunks(reader)) / 2 / 24000
        writer.close()
    # Faster speech is shorter. Piper samples durations with noise: over 150 requests at each
    # speed, the longest at 1.5 was 0.84 of the shortest at 1.0 (0.75 as medians), the longest
    # at 4.0 0.68 of the shortest at 1.5, the shortest at 0.25 2.7 times the longest at 1.0.
    assert seconds[1.5] < seconds[1.0] * 0.9
    assert seconds[0.25] > 2 * seconds[1.0] and seconds[4.0] < seconds[1.5] * 0.8


async def test_sample_rate_field_and_request_id(server: VoicewsServer) -> None:
    """voicews-only ``sample_rate`` sets a format's rate; each response names its request."""
    ids = set()
    for fmt, rate in (("wav", 16000), ("flac", 8000), ("pcm", 48000)):
        body = json.dumps({"input": "Hi.", "response_format": fmt, "sample_rate": rate}).encode()
        status, headers, reader, writer = await post(server.port, body)
        data = b"".join(d for _, d in await chunks(reader))
        writer.close()
        assert status == 200 and headers["x-voicews-sample-rate"] == str(rate)
        if fmt != "pcm":
            with av.open(io.BytesIO(data)) as container:
                assert container.streams.audio[0].rate == rate
        ids.add(headers["x-request-id"])
    assert len(ids) == 3 and all(len(i) == 32 for i in ids)


async def test_voice_is_the_servers_or_openais_and_the_header_names_who_answered(
    server: VoicewsServer,
) -> None:
    """A voice the server has speaks; OpenAI's names (its clients' defaults) and none get the
    default; any other name is refused, listing the voices."""
    for voice, answered in (("en_US-joe-medium", "en_US-joe-medium"), ("alloy", "en_US-joe-medium"),
                            ("cedar", "en_US-joe-medium"), (None, "en_US-joe-medium")):  # fmt: skip
        body = json.dumps({"input": "Hi.", "voice": voice, "response_format": "pcm"}).encode()
        status, headers, reader, writer = await post(server.port, body)
        spoken = await chunks(reader)
        writer.close()
        assert (status, headers["x-voicews-voice"]) == (200, answered) and spoken, voice
    status, _, reader, writer = await post(server.port, b'{"input": "hi", "voice": "nobody"}')
    error = json.loads(await asyncio.wait_for(reader.read(), timeout(5)))["error"]
    writer.close()
    assert (status, error["code"]) == (400, "invalid_request")
    assert error["message"] == "voice: unknown voice 'nobody'; choose from en_US-joe-medium"


async def test_bad_requests_get_clear_errors(server: VoicewsServer) -> None:
    opus_at_24k = b'{"input": "hi", "response_format": "opus", "sample_rate": 24000}'
    cases = [
        (b"{not json", 400, "invalid_request", "not valid JSON"),
        (b'{"input": ""}', 400, "invalid_request", "input"),
        (b'{"input": "hi", "response_format": "ogg"}', 400, "invalid_request", "'mp3', 'opus'"),
        (b'{"input": "hi", "speed": 4.5}', 400, "invalid_request", "speed"),
        (b'{"input": "hi", "speed": 0.2}', 400, "invalid_request", "speed"),
        (b'{"input": "hi", "sample_rate": 11025}', 400, "invalid_request", "8000, 16000"),
        (opus_at_24k, 400, "invalid_request", "48000"),
        (b'{"input": "hi", "stream_format": "sse"}', 400, "invalid_request", "stream_format"),
        (json.dumps({"input": "x" * 9000}).encode(), 413, "input_too_long", "characters"),
        (b" " * (1 << 20) + b"{}", 413, "request_too_large", "body"),
    ]
    for body, expected, code, mention in cases:
        status, _, reader, writer = await post(server.port, body)
        error = json.loads(await asyncio.wait_for(reader.read(), timeout(5)))["error"]
        writer.close()
        assert (status, error["code"]) == (expected, code), body[:40]
        assert mention in error["message"], error
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /v1/audio/speech HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    response = await asyncio.wait_for(reader.read(), timeout(5))
    writer.close()
    assert response.startswith(b"HTTP/1.1 405") and b"\r\nallow: POST\r\n" in response
    assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == "method_not_allowed"


async def test_errors_are_json_in_the_openai_shape(server: VoicewsServer) -> None:
    status, headers, reader, writer = await post(server.port, b'{"input": 5}')
    body = json.loads(await asyncio.wait_for(reader.read(), timeout(5)))
    writer.close()
    assert status == 400 and headers["content-type"] == "application/json"
    assert body["error"]["code"] == "invalid_request" and "input" in body["error"]["message"]


async def preflight(port: int, origin: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"OPTIONS /v1/audio/speech HTTP/1.1\r\nHost: t\r\nOrigin: " + origin + b"\r\n"
        b"Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"
    )
    response = await asyncio.wait_for(reader.read(), timeout(5))
    writer.close()
    return response


async def test_cors_preflight_and_headers_for_browsers(server: VoicewsServer) -> None:
    response = await preflight(server.port, b"https://app.test")
    assert response.startswith(b"HTTP/1.1 204")
    assert b"access-control-allow-origin: https://app.test" in response
    assert b"access-control-allow-methods: POST" in response
    # An Origin admission refuses (here malformed: it has a path) is never echoed back.
    response = await preflight(server.port, b"https://app.test/evil")
    assert b"access-control-allow-origin" not in response


async def test_client_leaving_mid_stream_stops_synthesis(server: VoicewsServer) -> None:
    assert server.app is not None
    status, _, reader, writer = await post(server.port, json.dumps({"input": TEXT}).encode())
    assert status == 200
    await reader.readline()
    writer.transport.abort()
    async with asyncio.timeout(timeout(5)):
        while server.app.sessions or server.worker.queued:
            await asyncio.sleep(0.02)
    jobs = server.worker.stats.jobs_done
    await asyncio.sleep(0.3)
    assert server.worker.stats.jobs_done - jobs <= 1


REPLY = (
    "Sure, I can help with that. The forecast for tomorrow is sunny, with a high of 24 "
    "degrees and a light breeze. Dr. Lee says it is a good day for a walk, e.g. in the park."
)
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm;rate=24000;channels=1;encoding=s16le",
}


async def test_openai_client_streams_every_format(server: VoicewsServer) -> None:
    """The official ``openai`` package, as LiveKit's and Pipecat's plugins use it: every
    ``response_format`` starts before the text's last segment is synthesized, decodes with
    PyAV, and lasts as long as the ``wav`` (codecs add priming and padding; Piper's noise
    varies durations by about 1%)."""
    client = openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="unused")
    seconds = {}
    for fmt in ("wav", *(f for f in RESPONSE_FORMATS if f != "wav")):
        jobs_before = server.worker.stats.jobs_done
        body, jobs_at_first = bytearray(), None
        async with client.audio.speech.with_streaming_response.create(
            model="tts-1",
            voice="alloy",
            input=REPLY,
            response_format=fmt,  # type: ignore[arg-type]
        ) as response:
            assert response.headers["content-type"] == CONTENT_TYPES[fmt]
            assert response.headers["x-request-id"]
            async for chunk in response.iter_bytes():
                if jobs_at_first is None:
                    jobs_at_first = server.worker.stats.jobs_done - jobs_before
                body += chunk
        jobs = server.worker.stats.jobs_done - jobs_before
        assert jobs_at_first is not None and jobs_at_first < jobs - 1, (fmt, jobs_at_first, jobs)
        if fmt == "pcm":
            seconds[fmt] = len(body) / 2 / 24000
            continue
        with av.open(io.BytesIO(bytes(body))) as container:
            stream = container.streams.audio[0]
            seconds[fmt] = sum(f.samples for f in container.decode(stream)) / stream.rate
    await client.close()
    for duration in seconds.values():
        assert abs(duration - seconds["wav"]) < 0.05 * seconds["wav"], seconds
