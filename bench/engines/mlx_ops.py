"""MLX operations and evaluations per window and per second of audio: as shipped against now.

On a GPU every operation of a lazy MLX graph is a kernel to dispatch (or a view to set up),
and the host's dispatching, not the arithmetic, was what a window of the streaming decoder
cost (issue 33). Counting the operations is the device-independent measure: it needs no GPU.
For each sentence and window size, through the engine's own ``synthesize``:

- ``stream``: the streaming decoder as shipped (state carried across windows, ``decode.py``);
- ``whole``: each window decoded whole from its receptive field (``windows.py``): at its
  own length (the CPU's way) or padded to its bucket (the GPU's way, batched and compiled),
  at the shipped window plan (first window 8 frames) and with the first window as large as
  the rest; ``fused``: under ``mx.compile``, the graph nodes actually handed to ``eval``
  (element-wise runs become one node each).

Counts are of the graph handed to each ``mx.eval`` (walked with ``mx.export_to_dot``) before
fusion unless said, with the GPU's convolutions (MLX's ``conv1d``; ``--conv matmul`` counts
the CPU's matmul per tap). On MLX's CPU backend ``mx.fast.layer_norm`` expands into its
parts (one node on a GPU), which inflates the encoder's and the duration predictor's
counts here: ``ops_per_audio_s_gpu_graph`` counts each of those layer norms as the one node a
GPU's graph has (measured: an expanded one is 18 operations on MLX's CPU backend).

With ``--time N`` it also times ``synthesize`` on this machine's MLX device, shipped against
now, alternating, N times each: medians of wall-clock and process CPU seconds per second of
audio, and first audio.

    python -m bench mlx_ops                      # counts only (~2 min on MLX's CPU backend)
    python -m bench mlx_ops --time 3 --json ops.json
    python -m bench mlx_ops --chunks --time 5             # timing only
    python -m bench mlx_ops --chunks --together 1 4 16 64 # sessions beginning at once

With ``--together`` it counts the host step that begins several sentences at once (their
encoders, durations and flows, ``MlxPiperEngine.begin``) against each begun alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import mlx.core as mx
import numpy as np

from bench.common import json_safe, source_version
from bench.engines.measures import graph_ops
from voicews.engines.base import Begin, SynthesisOptions, WordStarts
from voicews.engines.mlx_piper import durations, encoder
from voicews.engines.mlx_piper.engine import MlxConfig, MlxPiperEngine
from voicews.engines.mlx_piper.layers import layer_norm
from voicews.engines.mlx_piper.model import PiperVits

SENTENCES = {
    "short": "Hello there.",
    "long": (
        "Your flight to Denver leaves early tomorrow morning from gate twelve, so please arrive "
        "at the airport two hours before departure and keep your boarding pass ready."
    ),
}


@dataclass
class Evals:
    """Operations per ``mx.eval`` call, in order, while :func:`counting` was active."""

    ops: list[int] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    layer_norms: int = 0
    """Layer norms built meanwhile (each one node on a GPU, expanded on MLX's CPU backend)."""


def layer_norm_ops() -> int:
    """Operations one ``mx.fast.layer_norm`` is in this device's graph (1 on a GPU)."""
    x, w = mx.ones((4, 8)), mx.ones((8,))
    mx.eval(x, w)
    return sum(graph_ops(mx.fast.layer_norm(x, w, w, 1e-5)).values())


@contextmanager
def counting() -> Iterator[Evals]:
    """Counts every ``mx.eval``'s graph (the engine evaluates only through ``mx.eval``)."""
    real = mx.eval
    evals = Evals()

    def eval_counted(*arrays: Any) -> None:
        flat = [a for a in arrays if isinstance(a, mx.array)]
        flat += [x for a in arrays if isinstance(a, (list, tuple)) for x in a]
        kinds = graph_ops(*flat)
        evals.ops.append(sum(kinds.values()))
        evals.kinds.update(kinds)
        real(*arrays)

    def norm_counted(x: mx.array, params: tuple[mx.array, mx.array]) -> mx.array:
        evals.layer_norms += 1
        return layer_norm(x, params)

    mx.eval = eval_counted
    encoder.layer_norm = durations.layer_norm = norm_counted
    try:
        yield evals
    finally:
        mx.eval = real
        encoder.layer_norm = durations.layer_norm = layer_norm


def chunks(engine: MlxPiperEngine, text: str, options: SynthesisOptions) -> list[np.ndarray]:
    return [a for a in engine.synthesize(text, options) if not isinstance(a, WordStarts)]


def build(config: MlxConfig, conv: str, seed: int = 0) -> MlxPiperEngine:
    engine = MlxPiperEngine(seed=seed, config=config)
    if conv != ("matmul" if engine.model.matmul else "native"):
        engine.model = PiperVits(engine.model.weights, matmul=conv == "matmul")
    return engine


def count_row(
    name: str, engine: MlxPiperEngine, text: str, chunk: int, initial: int
) -> dict[str, Any]:
    """One synthesis counted: the operations of each eval, per window and per audio second."""
    options = SynthesisOptions(chunk_frames=chunk)
    chunks(engine, text, options)  # once uncounted: weights loaded, graphs compiled
    with counting() as evals:
        audio = chunks(engine, text, options)
    seconds = sum(map(len, audio)) / engine.sample_rate
    hop = engine.model.hop
    windows = [len(a) // hop for a in audio]
    # The evals that end a window are the last len(audio) ones of each sentence; with one
    # sentence, the first evals are the encoder's (durations, then the latents where read).
    window_ops = evals.ops[-len(audio) :]
    full = [ops for ops, frames in zip(window_ops, windows, strict=True) if frames == chunk]
    return {
        "decoder": name,
        "chunk_frames": chunk,
        "initial_frames": initial,
        "audio_s": round(seconds, 3),
        "windows": windows,
        "evals": len(evals.ops),
        "evals_per_audio_s": round(len(evals.ops) / seconds, 1),
        "ops_total": sum(evals.ops),
        "ops_per_audio_s": round(sum(evals.ops) / seconds),
        "ops_per_audio_s_gpu_graph": round(
            (sum(evals.ops) - evals.layer_norms * (layer_norm_ops() - 1)) / seconds
        ),
        "ops_before_windows": sum(evals.ops[: -len(audio)]),
        "ops_per_window": window_ops,
        "ops_per_full_window": statistics.median(full) if full else None,
        "top_ops": evals.kinds.most_common(6),
    }


def counts(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for label in args.sentences:
        text = SENTENCES[label]
        for chunk in args.chunks:
            whole = partial(MlxConfig, chunk_frames=chunk, decode="whole")
            full = partial(whole, initial_chunk_frames=chunk, compile="on")
            variants: list[tuple[str, MlxConfig, bool]] = [
                ("stream", MlxConfig(chunk_frames=chunk), False),
                ("whole, exact lengths (CPU)", whole(compile="off"), False),
                ("whole, bucketed (GPU)", whole(compile="on"), False),
                ("whole, bucketed, first window full", full(), False),
                ("whole, bucketed, first window full, fused", full(), True),
            ]
            for name, config, fused in variants:
                engine = build(config, args.conv)
                if fused:
                    mx.enable_compile()
                else:
                    mx.disable_compile()  # compiled functions run as traced: before fusion
                row = count_row(name, engine, text, chunk, config.initial_chunk_frames)
                row["sentence"] = label
                mx.enable_compile()
                rows.append(row)
                print(
                    f"{label:5} chunk {chunk:3} {name:42} ops/window {row['ops_per_full_window']}"
                    f"  ops/audio s {row['ops_per_audio_s']:6} (GPU graph "
                    f"{row['ops_per_audio_s_gpu_graph']:6})  evals/audio s "
                    f"{row['evals_per_audio_s']:5}  windows {row['windows']}",
                    flush=True,
                )
    return rows


BEGUN = (
    "Sure, I can help with that.",
    "Your order shipped this morning.",
    "Let me check the schedule.",
    "The meeting moved to three.",
)
"""Replies' first sentences, for ``--together``: sessions beginning a turn at once."""


def first_sentences(engine: MlxPiperEngine, texts: list[str]) -> list[object]:
    """Each text's first ``Begin``, as the batched lane takes it from ``windows_of``."""
    options = SynthesisOptions()
    return [cast(Begin, next(engine.windows_of(text, options))).sentence for text in texts]


def begun(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Beginning ``n`` sentences at once, for each ``n`` of ``--together``: each sentence's
    encoder, durations and flow alone (as a lone session's) against all of them in one batch
    (``begin``, the batched lane's host step): operations (a GPU's graph) and evaluations."""
    engine = build(MlxConfig(decode="whole"), args.conv)
    norm = layer_norm_ops() - 1
    rows = []
    for n in args.together:
        texts = [BEGUN[i % len(BEGUN)] for i in range(n)]
        ids = [engine.phoneme_ids(text)[0] for text in texts]

        engine.begin(first_sentences(engine, texts))  # once uncounted
        with counting() as alone:
            for sentence in ids:
                engine._decoder_input(engine._latents(sentence, 1.0).z_p)
        begun = first_sentences(engine, texts)
        with counting() as together:
            engine.begin(begun)
        row: dict[str, Any] = {"sentences": n}
        for name, evals in (("alone", alone), ("together", together)):
            row[f"{name}_ops"] = sum(evals.ops) - evals.layer_norms * norm
            row[f"{name}_evals"] = len(evals.ops)
        rows.append(row)
        print(
            f"begin {n:3} sentences: alone {row['alone_ops']:7} operations in "
            f"{row['alone_evals']:3} evals, together {row['together_ops']:5} in "
            f"{row['together_evals']} ({row['alone_ops'] / row['together_ops']:.1f}x fewer)",
            flush=True,
        )
    return rows


def timing(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Shipped against now on this machine's default MLX device, alternating, same noise."""
    variants: dict[str, Callable[[], MlxPiperEngine]] = {
        "stream": lambda: MlxPiperEngine(seed=0, config=MlxConfig()),
        "whole": lambda: MlxPiperEngine(seed=0, config=MlxConfig(decode="whole")),
    }
    engines = {name: make() for name, make in variants.items()}
    for engine in engines.values():
        engine.warm()
    rows = []
    for label, text in SENTENCES.items():
        runs: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in engines}
        for _ in range(args.time):
            for name, engine in engines.items():  # same draws: the engines share a seed
                wall, cpu = time.perf_counter(), time.process_time()
                first, samples = None, 0
                for item in engine.synthesize(text, SynthesisOptions()):
                    if not isinstance(item, WordStarts):
                        first = first or time.perf_counter() - wall
                        samples += len(item)
                audio = samples / engine.sample_rate
                runs[name].append(
                    (
                        (time.perf_counter() - wall) / audio,
                        (time.process_time() - cpu) / audio,
                        first or 0.0,
                        audio,
                    )
                )
        for name, values in runs.items():
            row = {
                "sentence": label,
                "decoder": name,
                "device": engines[name].device,
                "repeats": args.time,
                "audio_s": values[0][3],
                "rtf_median": statistics.median(v[0] for v in values),
                "cpu_rtf_median": statistics.median(v[1] for v in values),
                "first_audio_s_median": statistics.median(v[2] for v in values),
            }
            rows.append(row)
            print(
                f"time {label:5} {name:6} on {row['device']}: RTF {row['rtf_median']:.3f}, "
                f"CPU RTF {row['cpu_rtf_median']:.3f}, first audio "
                f"{row['first_audio_s_median'] * 1000:.0f} ms (median of {args.time})",
                flush=True,
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--chunks", type=int, nargs="*", default=[16, 32, 64], help="none: no counts"
    )
    parser.add_argument("--conv", choices=["native", "matmul"], default="native")
    parser.add_argument("--sentences", nargs="+", choices=SENTENCES, default=list(SENTENCES))
    parser.add_argument("--time", type=int, default=0, help="timed runs of each decoder")
    parser.add_argument(
        "--together", type=int, nargs="*", default=[], help="sentences begun at once (1 4 16)"
    )
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    result: dict[str, Any] = {"version": source_version(), "conv": args.conv}
    if args.chunks:
        result["counts"] = counts(args)
    if args.together:
        result["begun"] = begun(args)
    if args.time:
        result["timing"] = timing(args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(json_safe(result), f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
