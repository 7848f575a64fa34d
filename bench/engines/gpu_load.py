"""A real ``voicews serve`` on an MLX engine: warm-up to ready, then bursts of conversations.

For issue 33's GPU check (``bench/engines/gpu_check.sh``), runnable anywhere: it starts the
server in its own process (``--engine mlx-piper`` by default), times ``/readyz`` from
``warming`` to ``ready`` and reads the server's own ``event=warmed`` line, then starts N
conversations in the same instant at ``--rate`` tokens a second (``bench.harness``'s burst:
one reply each, played with no jitter buffer) and prints, per N: first audio p50/p95, the
longest stall, conversations stalled, the server's CPU per second of audio, and the batched
decoder steps the compute worker made (from ``/metrics``). Each row is also appended to
``--out``/gpu_load.json as it is measured (a run cut short keeps what it measured).

    python -m bench gpu_load --n 1 16 64                 # the server's MLX default device
    python -m bench gpu_load --cpu-smoke                 # MLX's CPU backend, N = 1 and 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness.parts import burst, log
from bench.harness.processes import VoicewsProcess

SMOKE_ENV = {
    "VOICEWS_MLX_DEVICE": "cpu",
    "VOICEWS_MLX_DECODE": "whole",  # the GPU's decoder and the batched lane, on the CPU
    "VOICEWS_MLX_COMPILE": "on",
    "VOICEWS_MLX_CHUNK_FRAMES": "16",
    "VOICEWS_MLX_MAX_BATCH": "2",
}
BATCH_METRICS = (
    "voicews_worker_batches",
    "voicews_worker_batched_windows",
    "voicews_worker_begun_batches",
    "voicews_worker_begun_sentences",
)


async def http_get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        head, _, body = (await reader.read()).decode(errors="replace").partition("\r\n\r\n")
    finally:
        writer.close()
    return int(head.split()[1]), body.strip()


async def until_ready(server: VoicewsProcess, launched: float, limit: float) -> dict[str, Any]:
    """Poll ``/readyz`` until it says ``ready``: what it said meanwhile, and when."""
    said: list[str] = []
    while True:
        status, body = await http_get(server.port, "/readyz")
        if not said or said[-1] != body:
            said.append(body)
        if status == 200:
            break
        if time.monotonic() - launched > limit:
            raise RuntimeError(f"not ready after {limit:.0f} s: {said}\n{server.log_tail()}")
        await asyncio.sleep(0.05)
    text = server.log_path.read_text(errors="replace")
    warmed = re.search(r"event=warmed .*seconds=([\d.]+)", text)
    device = re.search(r'event=listening .*device=("[^"]*"|\S+)', text)
    return {
        "readyz_said": said,
        "launch_to_ready_s": round(time.monotonic() - launched, 2),
        "warm_s_logged": float(warmed.group(1)) if warmed else None,
        "device_logged": device.group(1).strip('"') if device else None,
    }


def record(out: Path | None, rows: dict[str, Any], key: str, value: Any) -> None:
    rows[key] = value
    print(f"{key}: {json.dumps(value)}", flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_load.json").write_text(json.dumps(rows, indent=2))


async def run(args: argparse.Namespace) -> None:
    rows: dict[str, Any] = {"engine": args.engine, "rate": args.rate}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server = VoicewsProcess(
            workdir, max(args.n), args=["--engine", args.engine, *shlex.split(args.server_args)]
        )
        launched = time.monotonic()
        await server.start(timeout=args.ready_limit)
        try:
            record(args.out, rows, "startup", await until_ready(server, launched, args.ready_limit))
            for repeat, n in enumerate(args.n):
                before = await server.metrics()
                summary, turns = await burst(server, n, args.rate, repeat)
                after = await server.metrics()
                row = asdict(summary)
                for name in BATCH_METRICS:
                    row[name.removeprefix("voicews_worker_")] = after.get(name, 0) - before.get(
                        name, 0
                    )
                row["largest_batch_so_far"] = after.get("voicews_worker_largest_batch")
                row["audio_s"] = round(sum(t.audio_s for t in turns if t.ok), 2)
                record(args.out, rows, f"burst_{n}", row)
                log(
                    f"N={n}: first audio p50/p95 {summary.ttfa_p50_ms:.0f}/"
                    f"{summary.ttfa_p95_ms:.0f} ms, longest stall {summary.max_stall_ms:.0f} ms, "
                    f"{summary.stalled}/{n} stalled, event loop "
                    f"{summary.loop_ms_per_audio_s:.1f} ms of CPU per audio second, "
                    f"{row['batches']:.0f} batched steps of "
                    f"{row['batched_windows'] / max(1, row['batches']):.1f} windows, "
                    f"{row['begun_sentences']:.0f} sentences begun in "
                    f"{row['begun_batches']:.0f} batches"
                )
        finally:
            server.stop()
            if args.out is not None:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "server.log").write_text(server.log_tail(200))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="mlx-piper")
    parser.add_argument("--n", type=int, nargs="+", help="conversations a burst (1 16 64)")
    parser.add_argument("--rate", type=float, default=20.0, help="tokens a second")
    parser.add_argument("--ready-limit", type=float, default=240.0, help="seconds to ready")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--server-args", default="", help='more `serve` options, one string: "--voice X.onnx"'
    )
    parser.add_argument(
        "--cpu-smoke", action="store_true", help="MLX's CPU backend, batched decoder, N = 1 2"
    )
    args = parser.parse_args()
    if args.cpu_smoke:
        os.environ.update(SMOKE_ENV)
    args.n = args.n or ([1, 2] if args.cpu_smoke else [1, 16, 64])
    asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
