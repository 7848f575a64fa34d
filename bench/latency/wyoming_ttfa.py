"""First audio through Wyoming: voicews (``serve --wyoming-uri``) against wyoming-piper.

Both servers run as separate processes on loopback with the same voice, the bundled
``en_US-joe-medium`` ``.onnx`` (``voicews.engines.piper.bundled_voice()``), and are spoken to
as Home Assistant does, one connection per reply through ``wyoming.client.AsyncTcpClient``:
``synthesize-start``, a ``synthesize-chunk`` per word piece (``voicews.client.word_pieces``)
at the token rate, ``synthesize`` with the whole text (for servers that cannot stream),
``synthesize-stop``; audio comes back until ``synthesize-stopped``. Each reply goes to both
servers in turn, in alternating order, with the same deltas on the same schedule.

    pip install -e '.[bench]'
    python -m bench wyoming_ttfa                   # 20 and 50 tokens/s, 3 passes (~3 min)
    python -m bench wyoming_ttfa --rates 20 --repeats 1 --replies 2      # smoke run

Per turn: first audio (first chunk sent -> first ``audio-chunk`` received) and end -> last
audio (``synthesize-stop`` sent -> last ``audio-chunk``). Figures: the median over passes of
each pass's median (p95 over all turns); the target is voicews at most 0.3x the peer's median
first audio at 20 tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.common import REPLIES, json_safe, rate_list, source_version
from voicews.client import word_pieces
from voicews.engines.piper import bundled_voice

try:
    from wyoming.audio import AudioChunk
    from wyoming.client import AsyncTcpClient
    from wyoming.error import Error as WyomingError
    from wyoming.info import Describe, Info
    from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop
except ImportError:
    sys.exit("bench wyoming_ttfa needs the wyoming client and the peer: pip install -e '.[bench]'")

VOICEWS, PEER = "voicews", "wyoming-piper"
TARGET_RATIO = 0.3
TARGET_RATE = 20.0


@dataclass
class Turn:
    server: str
    rate: float
    reply: int
    repeat: int
    first_audio_ms: float | None = None
    end_to_last_ms: float | None = None
    audio_s: float = 0.0
    errors: list[str] = field(default_factory=list)


class Server:
    """One server process speaking Wyoming on a free loopback port."""

    def __init__(self, name: str, command: list[str], port: int, log: Path) -> None:
        self.name, self.port, self._log = name, port, log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    async def ready(self, seconds: float = 120.0) -> None:
        """Answers ``describe``: its handler runs and the voice is loaded (or about to be)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self._log.read_text()[-2000:]}")
            try:
                async with AsyncTcpClient("127.0.0.1", self.port) as client:
                    await client.write_event(Describe().event())
                    event = await asyncio.wait_for(client.read_event(), 10)
                    if event is not None and Info.is_type(event.type):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready:\n{self._log.read_text()[-2000:]}")
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_servers(workdir: Path) -> list[Server]:
    voice = bundled_voice()
    ws_port, voicews_port, peer_port = free_port(), free_port(), free_port()
    ours = [sys.executable, "-m", "voicews.cli", "serve", "--port", str(ws_port)]
    ours += ["--wyoming-uri", f"tcp://127.0.0.1:{voicews_port}", "--drain-timeout", "2"]
    downloads = workdir / "wyoming-downloads"  # stays empty: the voice is in the data dir
    downloads.mkdir()
    peer = [sys.executable, "-m", "wyoming_piper", "--uri", f"tcp://127.0.0.1:{peer_port}"]
    peer += ["--voice", voice.name.removesuffix(".onnx"), "--data-dir", str(voice.parent)]
    peer += ["--download-dir", str(downloads)]
    return [
        Server(VOICEWS, ours, voicews_port, workdir / "voicews.log"),
        Server(PEER, peer, peer_port, workdir / "peer.log"),
    ]


async def speak(server: Server, turn: Turn, text: str, timeout: float = 60.0) -> Turn:
    """One reply over a fresh connection, as Home Assistant streams it."""
    pieces = word_pieces(text)
    arrivals: list[float] = []
    samples = 0
    async with AsyncTcpClient("127.0.0.1", server.port) as client:
        await client.write_event(SynthesizeStart().event())
        first_sent = time.perf_counter()

        async def send() -> float:
            for index, piece in enumerate(pieces):
                await asyncio.sleep(max(0.0, first_sent + index / turn.rate - time.perf_counter()))
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text=text).event())
            await client.write_event(SynthesizeStop().event())
            return time.perf_counter()

        sender = asyncio.create_task(send())
        try:
            async with asyncio.timeout(timeout):
                while (event := await client.read_event()) is not None:
                    if AudioChunk.is_type(event.type):
                        arrivals.append(time.perf_counter())
                        samples += AudioChunk.from_event(event).samples
                        rate = AudioChunk.from_event(event).rate
                    elif WyomingError.is_type(event.type):
                        turn.errors.append(WyomingError.from_event(event).text)
                    elif event.type == "synthesize-stopped":
                        break
                else:
                    turn.errors.append("connection closed")
            stopped_at = await sender
        except Exception as exc:  # a failed turn is a result, not a crash
            turn.errors.append(f"{type(exc).__name__}: {exc}")
            sender.cancel()
            return turn
    if arrivals:
        turn.first_audio_ms = (arrivals[0] - first_sent) * 1000
        turn.end_to_last_ms = (arrivals[-1] - stopped_at) * 1000
        turn.audio_s = samples / rate
    return turn


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else median(values)


def summary(turns: list[Turn], server: str, rate: float) -> dict[str, float]:
    mine = [t for t in turns if t.server == server and t.rate == rate]
    firsts = [t.first_audio_ms for t in mine if t.first_audio_ms is not None]
    per_pass = [
        median([t.first_audio_ms for t in mine if t.repeat == r and t.first_audio_ms is not None])
        for r in sorted({t.repeat for t in mine})
    ]
    return {
        "first_audio_p50_ms": median(per_pass),
        "first_audio_p95_ms": p95(firsts),
        "end_to_last_p50_ms": median([t.end_to_last_ms for t in mine if t.end_to_last_ms]),
        "failed": float(sum(1 for t in mine if t.errors or t.first_audio_ms is None)),
        "turns": float(len(mine)),
    }


def table(turns: list[Turn], rates: list[float]) -> tuple[str, dict[float, float]]:
    lines = [
        "| rate | first audio p50 / p95: voicews | wyoming-piper | ratio p50 "
        "| end -> last audio p50: voicews / peer | failed |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    ratios = {}
    for rate in rates:
        ours, peer = summary(turns, VOICEWS, rate), summary(turns, PEER, rate)
        ratios[rate] = ours["first_audio_p50_ms"] / peer["first_audio_p50_ms"]
        lines.append(
            f"| {rate:g} tokens/s "
            f"| {ours['first_audio_p50_ms']:.0f} / {ours['first_audio_p95_ms']:.0f} ms "
            f"| {peer['first_audio_p50_ms']:.0f} / {peer['first_audio_p95_ms']:.0f} ms "
            f"| {ratios[rate]:.2f} "
            f"| {ours['end_to_last_p50_ms']:.0f} / {peer['end_to_last_p50_ms']:.0f} ms "
            f"| {ours['failed']:.0f} / {peer['failed']:.0f} of {ours['turns']:.0f} |"
        )
    return "\n".join(lines), ratios


async def run(args: argparse.Namespace) -> None:
    replies = REPLIES[: args.replies]
    with tempfile.TemporaryDirectory(prefix="voicews-wyoming-bench-") as tmp:
        servers = start_servers(Path(tmp))
        try:
            await asyncio.gather(*(s.ready() for s in servers))
            for server in servers:  # warm-up: the peer loads its voice on first use
                await speak(server, Turn(server.name, 50.0, -1, -1), REPLIES[0][:60])
            turns: list[Turn] = []
            for rate in args.rates:
                for repeat in range(args.repeats):
                    for index, text in enumerate(replies):
                        order = servers if (repeat + index) % 2 == 0 else servers[::-1]
                        for server in order:
                            turn = Turn(server.name, rate, index, repeat)
                            turns.append(await speak(server, turn, text))
                            await asyncio.sleep(0.3)
                    print(f"  {rate:g} tokens/s pass {repeat + 1}/{args.repeats} done", flush=True)
            downloads = os.listdir(Path(tmp) / "wyoming-downloads")
        finally:
            for server in servers:
                server.stop()
    text, ratios = table(turns, args.rates)
    print(
        f"\nvoicews {source_version()} vs wyoming-piper, voice {bundled_voice().name}, "
        f"{os.cpu_count()} CPUs, loopback, {args.repeats} passes of {len(replies)} replies\n"
    )
    print(text)
    if TARGET_RATE in ratios:
        ok = ratios[TARGET_RATE] <= TARGET_RATIO
        verdict = "meets" if ok else "MISSES"
        print(
            f"\n{verdict} the target: first audio at {TARGET_RATE:g} tokens/s "
            f"{ratios[TARGET_RATE]:.2f}x the peer's (target <= {TARGET_RATIO}x)"
        )
    if downloads:
        print(f"WARNING: wyoming-piper downloaded {downloads}")
    for turn in turns:
        if turn.errors:
            print(f"failed: {turn.server} {turn.rate:g} tokens/s reply {turn.reply}: {turn.errors}")
    if args.json:
        Path(args.json).write_text(json.dumps(json_safe([asdict(t) for t in turns]), indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=rate_list, default=[20.0, 50.0], help="tokens/s [20,50]")
    parser.add_argument("--repeats", type=int, default=3, help="passes over the replies [3]")
    parser.add_argument("--replies", type=int, default=len(REPLIES), help="replies per pass [5]")
    parser.add_argument("--json", help="write every turn's timings here")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
