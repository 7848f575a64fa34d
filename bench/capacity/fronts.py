"""One process against front processes (``voicews serve --fronts N``), side by side in one run.

With ``--fronts`` the sessions' event loops (sockets, sessions, framing) run in front processes
and the engine's process does only the compute and its own Python, every job and its audio
crossing a pipe. This starts one server per front count (same engine) and, at each N, runs the
same bursts against each in turn, alternating which goes first (``harness/parts.py``' burst:
N conversations started in the same instant at ``--rate`` tokens/s, played with no jitter
buffer). Per N and server, the medians over ``--repeats`` bursts: first audio p50/p95, the most
stall one conversation heard, conversations stalled over 100 ms, and CPU per second of audio:
every process of the server's, their event loops (each process's main thread), and the
engine's process alone (with fronts, what the hub, the relays and the compute cost it).

    python -m bench fronts                          # fronts 1 and 2, N = 16, 32; 3 bursts
    python -m bench fronts --fronts 1,2,4 --ns 8,16 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from bench.common import source_version
from bench.harness.parts import burst, log, warm_up
from bench.harness.processes import VoicewsProcess, proc_cpu_s
from bench.harness.summaries import fmt, int_list, render


class FrontsProcess(VoicewsProcess):
    def __init__(self, workdir: Path, max_sessions: int, fronts: int, engine: str) -> None:
        self.name = f"fronts={fronts}"
        self.fronts = fronts
        super().__init__(workdir, max_sessions, args=["--engine", engine])

    def command(self) -> list[str]:
        return [*super().command(), "--fronts", str(self.fronts)]

    def engine_cpu_s(self) -> float:
        """The first process's own: with ``--fronts``, the engine's (hub and compute)."""
        return proc_cpu_s(f"/proc/{self.pid}/stat")


async def measure(
    servers: list[FrontsProcess], ns: list[int], repeats: int, rate: float
) -> dict[tuple[int, str], dict[str, float]]:
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    for n in ns:
        for repeat in range(repeats):
            order = servers if repeat % 2 == 0 else servers[::-1]
            for server in order:
                engine0 = server.engine_cpu_s()
                summary, turns = await burst(server, n, rate, repeat)
                engine = server.engine_cpu_s() - engine0
                audio_s = sum(t.audio_s for t in turns if t.ok)
                row = {
                    "ttfa_p50_ms": summary.ttfa_p50_ms,
                    "ttfa_p95_ms": summary.ttfa_p95_ms,
                    "max_stall_ms": summary.max_stall_ms,
                    "stalled": summary.stalled,
                    "failed": summary.failed,
                    "cpu": summary.cpu_ms_per_audio_s,
                    "loop": summary.loop_ms_per_audio_s,
                    "engine": 1000 * engine / audio_s if audio_s else float("nan"),
                }
                runs.setdefault((n, server.name), []).append(row)
                log(f"  N={n} {server.name} repeat {repeat}: " + ", ".join(
                    f"{k} {v:.1f}" for k, v in row.items()
                ))  # fmt: skip
                await asyncio.sleep(1.0)
    return {
        key: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        for key, rows in runs.items()
    }


def table(levels: dict[tuple[int, str], dict[str, float]]) -> str:
    header = [
        "N", "server", "first audio p50", "p95", "most stall", "stalled", "failed",
        "CPU ms/audio s", "event loops", "engine's process",
    ]  # fmt: skip
    rows = []
    for (n, name), r in sorted(levels.items()):
        rows.append([
            str(n), name,
            fmt(r["ttfa_p50_ms"], ".0f", " ms"), fmt(r["ttfa_p95_ms"], ".0f", " ms"),
            fmt(r["max_stall_ms"], ".0f", " ms"), f"{r['stalled']:.0f}/{n}", f"{r['failed']:.0f}",
            fmt(r["cpu"], ".0f"), fmt(r["loop"], ".1f"), fmt(r["engine"], ".0f"),
        ])  # fmt: skip
    return render(header, rows, left=2)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="voicews-fronts-") as tmp:
        workdir = Path(tmp)
        servers = [
            FrontsProcess(workdir, max(args.ns) + 8, fronts, args.engine) for fronts in args.fronts
        ]
        try:
            log(f"starting {len(servers)} servers ...")
            await asyncio.gather(*(s.start() for s in servers))
            for server in servers:
                await warm_up(server, 0.0)
            levels = await measure(servers, args.ns, args.repeats, args.rate)
        finally:
            for server in servers:
                server.stop()
    print(
        f"voicews {source_version()}, --engine {args.engine}, {args.rate:g} tokens/s, medians "
        f"of {args.repeats} bursts, no jitter buffer; CPU per second of audio"
    )
    print(table(levels))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fronts", type=int_list, default=[1, 2], help="front counts [1,2]")
    parser.add_argument("--ns", type=int_list, default=[16, 32], help="conversations at once")
    parser.add_argument("--repeats", type=int, default=3, help="bursts per N and server [3]")
    parser.add_argument("--rate", type=float, default=20.0, help="tokens/s [20]")
    parser.add_argument("--engine", default="piper")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
