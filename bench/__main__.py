"""``python -m bench`` lists the scenarios; ``python -m bench NAME [args]`` runs one.

Each scenario keeps its own arguments (``python -m bench NAME --help``) and runs as the main
module, as ``python -m`` would run it, so it behaves as it did as a script.
"""

from __future__ import annotations

import runpy
import sys

SCENARIOS: dict[str, tuple[str, str]] = {
    "ttfa": (
        "bench.latency.ttfa",
        "voicews alone, in-process: first audio, stalls, end of text to last audio, RTF",
    ),
    "pacing_ab": (
        "bench.latency.pacing_ab",
        "listening continuity, this checkout against another: stalls, one-word segments",
    ),
    "pacing_sim": (
        "bench.latency.pacing_sim",
        "listening continuity in simulated time: one conversation at 5/10/20 tok/s, deterministic",
    ),
    "compare": (
        "bench.latency.compare",
        "voicews against wyoming-piper in one run: first audio, concurrency, memory",
    ),
    "wyoming_ttfa": (
        "bench.latency.wyoming_ttfa",
        "first audio through Wyoming, as Home Assistant streams a reply, against wyoming-piper",
    ),
    "frameworks": (
        "bench.latency.frameworks",
        "first audio and barge-in through each client: own protocol, contexts, Pipecat, LiveKit",
    ),
    "continuity": (
        "bench.listening.continuity",
        "what is heard after first audio: stalls, one-word segments, intonation; against the peer",
    ),
    "capacity": (
        "bench.capacity.capacity",
        "conversations one box keeps smooth (lone, burst, staggered), against wyoming-piper",
    ),
    "lanes": ("bench.capacity.lanes", "lane counts side by side, the same load on each"),
    "fronts": (
        "bench.capacity.fronts",
        "one process against front processes (serve --fronts N): bursts, CPU per process kind",
    ),
    "planner_load": (
        "bench.capacity.planner_load",
        "what reading the worker's load costs the event loop at 16 to 1024 conversations",
    ),
    "simulate": (
        "bench.capacity.simulate",
        "the worker's scheduling policies through the real sessions, in simulated time",
    ),
    "soak": (
        "bench.capacity.soak",
        "many sessions, turns and barge-ins: memory, descriptors, threads and tasks over time",
    ),
    "formats": (
        "bench.formats.formats",
        "each output format against plain pcm_s16le: first audio and CPU per audio second",
    ),
    "kokoro": (
        "bench.engines.kokoro",
        "Kokoro against Piper: cost per character, first audio, stalls; its decoder in windows",
    ),
    "kokoro_ab": (
        "bench.engines.kokoro_ab",
        "Kokoro graphs (int8, float, static): first audio, RTF, RSS, WER, DNSMOS; 1/2/4 at once",
    ),
    "piper_int8": (
        "bench.engines.piper_int8",
        "Piper's decoder quantized to int8, variants against float: time, SNR, WER, DNSMOS",
    ),
    "kokoro_tail": (
        "bench.engines.kokoro_tail",
        "Kokoro's pieces with their trailing silence cropped against whole: compute, level, DNSMOS",
    ),
    "kokoro_pair": (
        "bench.engines.kokoro_pair",
        "two Kokoro graphs judged in pairs over held-out sentences in every voice: DNSMOS, WER",
    ),
    "kokoro_windows": (
        "bench.engines.kokoro_windows",
        "Kokoro's long pieces decoded in two windows against whole: first audio, DNSMOS, WER",
    ),
    "kokoro_cost": (
        "bench.engines.kokoro_cost",
        "Kokoro's cost per inference against its length, beside Piper's: the first segment's",
    ),
    "kokoro_calibrate": (
        "bench.engines.kokoro_calibrate",
        "measure the activation ranges Kokoro's static graph is built from, and ship them",
    ),
    "slow_engine": (
        "bench.engines.slow_engine",
        "first audio and stalls with an engine 10x slower than Piper, in simulated time",
    ),
    "ort_sessions": (
        "bench.engines.ort_sessions",
        "the lanes' onnxruntime sessions: Piper inferences alone and side by side, memory",
    ),
    "mlx_chunked": (
        "bench.engines.mlx_chunked",
        "the mlx-piper engine's windowed decode: first-window compute, RTF, join quality",
    ),
    "mlx_ops": (
        "bench.engines.mlx_ops",
        "MLX operations and evals per window and per audio second, shipped decoder against now",
    ),
    "mlx_cpu_ab": (
        "bench.engines.mlx_cpu_ab",
        "MLX Piper on this machine's MLX device, this checkout against a baseline, alternating",
    ),
    "gpu_load": (
        "bench.engines.gpu_load",
        "a real server on an MLX engine: warm-up to ready, bursts of N conversations, batching",
    ),
    "mlx_kokoro_ops": (
        "bench.engines.mlx_kokoro_ops",
        "MLX Kokoro's operations and evals per audio second by component, shipped against now",
    ),
    "mlx_kokoro": (
        "bench.engines.mlx_kokoro",
        "the mlx-kokoro engine per component, beside the onnxruntime engine",
    ),
    "normalize_cost": (
        "bench.text.normalize_cost",
        "the text normalizer's added cost per segment, beside gruut and NeMo where installed",
    ),
    "normalize_heard": (
        "bench.text.normalize_heard",
        "agent text as heard (Piper, then Whisper) before and after normalizing",
    ),
    "attacks": (
        "bench.hostile.attacks",
        "a calm session beside each hostile client, against another checkout, peak memory",
    ),
}
"""Each scenario's module and what it measures, in one line; the module's folder is its group."""


def usage() -> str:
    width = max(map(len, SCENARIOS))
    lines = ["usage: python -m bench NAME [args]   (python -m bench NAME --help: its arguments)"]
    group = ""
    for name, (module, what) in SCENARIOS.items():
        if module.split(".")[1] != group:
            group = module.split(".")[1]
            lines.append(f"\n{group}/")
        lines.append(f"  {name:<{width}}  {what}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in SCENARIOS:
        print(f"no scenario {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, _ = SCENARIOS[argv[0]]
    sys.argv = [module, *argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
