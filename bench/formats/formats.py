"""What each output format costs: first audio and CPU per second of audio, against pcm_s16le.

Two parts, in one run:

- **conversion alone**: the bundled voice's audio for the built-in replies (synthesized once,
  segment by segment as a session cuts them) goes through each format's converter
  (``voicews.encoding``): the realtime ``FrameEncoder`` and the HTTP ``ContainerEncoder``. It
  reports the time the first engine chunk takes to become frames (what a format adds to first
  audio: that chunk is converted whole before its first frame is queued) and the CPU per
  second of audio, medians over ``--repeats``.
- **end to end**: an in-process server; each realtime format gets the same replies as
  word-piece deltas at ``--rate`` tokens/s (first delta -> first frame), and each HTTP
  ``response_format`` the same replies in one POST (request sent -> first body byte). Formats
  take turns within each repeat, so drift on a busy machine hits them alike.

    python -m bench formats                         # 5 replies x 3 repeats (~15 min)
    python -m bench formats --replies 1 --repeats 1 # smoke run (~2 min)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import REPLIES, json_safe, source_version
from voicews.audio import Audio
from voicews.client import RealtimeClient
from voicews.encoding import (
    RESPONSE_FORMATS,
    ContainerEncoder,
    FrameEncoder,
    OutputFormat,
    response_output,
)
from voicews.engines.base import SynthesisOptions, WordStarts
from voicews.engines.piper import PiperEngine
from voicews.server import ServerConfig, VoicewsServer
from voicews.text.segmenter import Segmenter, Urgency

REALTIME: tuple[tuple[int | None, str], ...] = (
    (None, "pcm_s16le"),  # None: the voice's own rate, the baseline
    (24000, "pcm_s16le"),
    (48000, "pcm_s16le"),
    (24000, "pcm_f32le"),
    (8000, "pcm_mulaw"),
    (8000, "pcm_alaw"),
    (48000, "opus"),
)
FRAME_MS = 40


def label(rate: int | None, fmt: str) -> str:
    return f"{fmt} @ {'native' if rate is None else rate}"


# --- conversion alone -------------------------------------------------------------------


def engine_audio(replies: Sequence[str]) -> tuple[list[list[Audio]], int]:
    """Each reply's engine chunks, cut into segments as a session cuts a whole text: an eager
    first segment (the chunk first audio waits for), then sentence-sized ones."""
    engine = PiperEngine()
    turns = []
    for text in replies:
        segmenter = Segmenter()
        segmenter.feed(text)
        first = segmenter.next_segment(Urgency.FIRST)
        segmenter.close()
        segments = [first]
        while (segment := segmenter.next_segment(Urgency.RELAXED)) is not None:
            segments.append(segment)
        turns.append(
            [
                chunk
                for segment in segments
                if segment is not None
                for chunk in engine.synthesize(segment.text, SynthesisOptions())
                if not isinstance(chunk, WordStarts)
            ]
        )
    return turns, engine.sample_rate


def time_realtime(fmt: OutputFormat, turns: list[list[Audio]], rate: int) -> tuple[float, float]:
    """(ms for the first chunk of a turn, CPU ms per audio second) over all turns."""
    firsts, cpu, seconds = [], 0.0, 0.0
    for chunks in turns:
        encoder = FrameEncoder(rate, fmt, FRAME_MS)
        started, cpu_started = time.perf_counter(), time.process_time()
        encoder.push(chunks[0])
        firsts.append((time.perf_counter() - started) * 1000)
        for chunk in chunks[1:]:
            encoder.push(chunk)
        encoder.finish()
        cpu += time.process_time() - cpu_started
        seconds += sum(c.size for c in chunks) / rate
    return statistics.median(firsts), cpu * 1000 / seconds


def time_container(fmt: str, turns: list[list[Audio]], rate: int) -> tuple[float, float]:
    """The same for an HTTP body: the session's conversion, then the container's."""
    output = response_output(fmt, rate, None)  # type: ignore[arg-type]
    firsts, cpu, seconds = [], 0.0, 0.0
    for chunks in turns:
        frames = FrameEncoder(rate, output, FRAME_MS)
        body = ContainerEncoder(fmt, output.sample_rate)  # type: ignore[arg-type]
        cpu_started = time.process_time()
        for index, chunk in enumerate(chunks):
            started = time.perf_counter()
            for data, _ in frames.push(chunk):
                body.push(data)
            if index == 0:
                firsts.append((time.perf_counter() - started) * 1000)
        for data, _ in frames.finish():
            body.push(data)
        body.finish()
        cpu += time.process_time() - cpu_started
        seconds += sum(c.size for c in chunks) / rate
    return statistics.median(firsts), cpu * 1000 / seconds


def conversion(replies: Sequence[str], repeats: int) -> dict[str, dict[str, float]]:
    turns, rate = engine_audio(replies)
    jobs: list[tuple[str, Callable[[], tuple[float, float]]]] = [
        (label(r, f), lambda r=r, f=f: time_realtime(OutputFormat(r or rate, f), turns, rate))  # type: ignore[misc]
        for r, f in REALTIME
    ]
    jobs += [
        (f"http {f}", lambda f=f: time_container(f, turns, rate))  # type: ignore[misc]
        for f in RESPONSE_FORMATS
    ]
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in jobs}
    for _ in range(repeats):
        for name, job in jobs:
            samples[name].append(job())
    return {
        name: {
            "first_chunk_ms": statistics.median(first for first, _ in runs),
            "cpu_ms_per_audio_s": statistics.median(cpu for _, cpu in runs),
        }
        for name, runs in samples.items()
    }


# --- end to end -------------------------------------------------------------------------


async def realtime_first_audio(url: str, text: str, rate: float) -> float:
    async with await RealtimeClient.connect(url) as client:
        turn = await client.speak(text, tokens_per_s=rate)
    assert turn.first_audio is not None and turn.done is not None and not turn.errors
    return turn.first_audio * 1000


async def http_first_byte(port: int, text: str, fmt: str) -> float:
    """Request sent -> first byte of the (chunked) body; the status and headers come first."""
    body = json.dumps({"input": text, "response_format": fmt}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    writer.write(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    assert (await reader.readline()).split()[1] == b"200"
    while await reader.readline() != b"\r\n":
        pass
    await reader.read(1)
    first = (time.perf_counter() - started) * 1000
    await reader.read()  # the rest, to the end
    writer.close()
    return first


async def end_to_end(replies: Sequence[str], repeats: int, rate: float) -> dict[str, float]:
    server = VoicewsServer(ServerConfig(port=0))
    await server.start()
    try:
        urls = {
            label(r, f): server.url + ("" if r is None else f"?sample_rate={r}&format={f}")
            for r, f in REALTIME
        }
        await realtime_first_audio(server.url, "Warming up, one moment.", 100)
        times: dict[str, list[float]] = {name: [] for name in urls}
        times |= {f"http {f}": [] for f in RESPONSE_FORMATS}
        for repeat in range(repeats):
            for text in replies:
                for name, url in urls.items():
                    times[name].append(await realtime_first_audio(url, text, rate))
                for fmt in RESPONSE_FORMATS:
                    first = await http_first_byte(server.port, text, fmt)
                    times[f"http {fmt}"].append(first)
            print(f"  end to end: repeat {repeat + 1}/{repeats}", file=sys.stderr)
        return {name: statistics.median(values) for name, values in times.items()}
    finally:
        await server.close()


# --- report -----------------------------------------------------------------------------


def report(alone: dict[str, dict[str, float]], e2e: dict[str, float], rate: float) -> None:
    base_alone, base_e2e = alone[label(None, "pcm_s16le")], e2e[label(None, "pcm_s16le")]
    base_http = e2e["http pcm"]
    print(
        f"{'format':<22}{'first chunk ms':>15}{'CPU ms/audio s':>16}"
        f"{'first audio ms':>16}{'vs baseline':>13}"
    )
    for name in alone:
        a = alone[name]
        base = base_http if name.startswith("http") else base_e2e
        delta = e2e[name] - base
        print(
            f"{name:<22}{a['first_chunk_ms']:>15.2f}{a['cpu_ms_per_audio_s']:>16.2f}"
            f"{e2e[name]:>16.0f}{delta:>+13.0f}"
        )
    print(
        f"\nfirst audio: realtime at {rate:g} tokens/s from the first delta, baseline "
        f"{label(None, 'pcm_s16le')} ({base_e2e:.0f} ms); http from the request, baseline "
        f"http pcm ({base_http:.0f} ms). Conversion alone, baseline: "
        f"{base_alone['first_chunk_ms']:.2f} ms, {base_alone['cpu_ms_per_audio_s']:.2f} ms/s."
    )
    for rate_ in (24000, 48000):
        name = label(rate_, "pcm_s16le")
        added = alone[name]["first_chunk_ms"] - base_alone["first_chunk_ms"]
        print(f"resampling to {rate_} Hz adds {added:.2f} ms to the first chunk (target <= 15)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--replies", type=int, default=len(REPLIES), help="how many replies")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=float, default=50.0, help="tokens/s for the realtime runs")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    args = parser.parse_args(argv)
    replies = REPLIES[: args.replies]
    print("conversion alone ...", file=sys.stderr)
    alone = conversion(replies, args.repeats)
    print("end to end ...", file=sys.stderr)
    e2e = asyncio.run(end_to_end(replies, args.repeats, args.rate))
    print(f"voicews {source_version()}; {len(replies)} replies x {args.repeats} repeats")
    report(alone, e2e, args.rate)
    if args.json:
        result: dict[str, Any] = {"version": source_version(), "alone": alone, "end_to_end": e2e}
        args.json.write_text(json.dumps(json_safe(result), indent=2) + "\n")


if __name__ == "__main__":
    main()
