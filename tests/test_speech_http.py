"""``POST /v1/audio/speech``: OpenAI-compatible, streamed as it is synthesized."""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave

from conftest import timeout
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
    body = json.dumps({"model": "tts-1", "voice": "en_US-joe-medium", "input": TEXT}).encode()
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


async def test_pcm_format_and_speed(server: VoicewsServer) -> None:
    lengths = []
    for speed in (1.0, 1.5):
        body = json.dumps({"input": "Hello there, a quick test.", "response_format": "pcm",
                           "speed": speed}).encode()  # fmt: skip
        status, headers, reader, writer = await post(server.port, body)
        assert status == 200
        assert headers["content-type"] == "audio/pcm;rate=22050;channels=1;encoding=s16le"
        lengths.append(sum(len(d) for _, d in await chunks(reader)))
        writer.close()
    assert lengths[1] < lengths[0] * 0.85  # faster speech is shorter


async def test_bad_requests_get_clear_errors(server: VoicewsServer) -> None:
    cases = [
        (b"{not json", 400, b"not valid JSON"),
        (b'{"input": ""}', 400, b"input"),
        (b'{"input": "hi", "response_format": "mp3"}', 400, b"response_format"),
        (b'{"input": "hi", "speed": 9}', 400, b"speed"),
        (json.dumps({"input": "x" * 9000}).encode(), 413, b"characters"),
        # a voice this server does not have: refused, naming the one it has
        (b'{"input": "hi", "voice": "alloy"}', 400, b"'alloy'; choose from en_US-joe-medium"),
    ]
    for body, expected, mention in cases:
        status, _, reader, writer = await post(server.port, body)
        text = await asyncio.wait_for(reader.read(), timeout(5))
        writer.close()
        assert status == expected, body
        assert mention in text, text
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /v1/audio/speech HTTP/1.1\r\nHost: t\r\n\r\n")
    assert (await reader.readline()).startswith(b"HTTP/1.1 405")
    writer.close()


async def test_errors_are_json_in_the_openai_shape(server: VoicewsServer) -> None:
    status, headers, reader, writer = await post(server.port, b'{"input": 5}')
    body = json.loads(await asyncio.wait_for(reader.read(), timeout(5)))
    writer.close()
    assert status == 400 and headers["content-type"] == "application/json"
    assert body["error"]["code"] == "invalid_request" and "input" in body["error"]["message"]


async def test_cors_preflight_and_headers_for_browsers(server: VoicewsServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"OPTIONS /v1/audio/speech HTTP/1.1\r\nHost: t\r\nOrigin: https://app.test\r\n"
        b"Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"
    )
    response = await asyncio.wait_for(reader.read(), timeout(5))
    writer.close()
    assert response.startswith(b"HTTP/1.1 204")
    assert b"access-control-allow-origin: https://app.test" in response
    assert b"access-control-allow-methods: POST" in response


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
