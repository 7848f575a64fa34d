"""MLX Piper on this machine's MLX device, this checkout against a baseline checkout.

Issue 33 asks that MLX Piper on MLX's CPU backend not get slower while the GPU path changes.
Each round runs one process per checkout (alternating which goes first, so drift hits both):
the engine as ``voicews serve`` builds it (its default decoder for the device), a warm-up,
then ``--repeats`` syntheses of a short sentence, with the medians of CPU seconds per second
of audio, first audio, and the encoder and duration predictor's CPU alone.

    python -m bench mlx_cpu_ab --baseline ../main --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TEXT = "Hello there."


def measure(repeats: int) -> dict[str, float]:
    """In the checkout on ``PYTHONPATH``: the medians of ``repeats`` syntheses."""
    import numpy as np

    from voicews.engines.base import SynthesisOptions, WordStarts
    from voicews.engines.mlx_piper.engine import MlxPiperEngine

    engine = MlxPiperEngine(seed=0)
    for _ in engine.synthesize("Warming up.", SynthesisOptions()):
        pass
    cpu, first = [], []
    for _ in range(repeats):
        wall, start = time.perf_counter(), time.process_time()
        heard, samples = None, 0
        for item in engine.synthesize(TEXT, SynthesisOptions()):
            if not isinstance(item, WordStarts):
                heard = heard or time.perf_counter() - wall
                samples += len(item)
        cpu.append((time.process_time() - start) / (samples / engine.sample_rate))
        first.append(1000 * (heard or 0.0))
    (ids,) = engine.phoneme_ids(TEXT)
    latents = []
    for _ in range(repeats):
        start = time.process_time()
        engine.model.latents(
            ids, noise_scale=0.667, length_scale=1.0, noise_w=0.8, rng=np.random.default_rng(0)
        )
        latents.append(1000 * (time.process_time() - start))
    return {
        "cpu_per_audio_s": statistics.median(cpu),
        "first_audio_ms": statistics.median(first),
        "latents_cpu_ms": statistics.median(latents),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="the other checkout's root")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.repeats)))
        return
    if args.baseline is None:
        parser.error("--baseline is needed")
    here = Path(__file__).resolve().parents[2]
    trees = {"baseline": args.baseline.resolve(), "this": here}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
        for name, tree in order:
            env = dict(os.environ, PYTHONPATH=str(tree))
            command = [sys.executable, str(Path(__file__).resolve()), "--child"]
            command += ["--repeats", str(args.repeats)]
            done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_ + 1} {name}: {runs[name][-1]}", flush=True)
    for name, rows in runs.items():
        figures = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        print(
            f"{name:8} {TEXT!r}: {figures['cpu_per_audio_s']:.3f} s of CPU per second of audio, "
            f"first audio {figures['first_audio_ms']:.0f} ms, encoder and durations "
            f"{figures['latents_cpu_ms']:.1f} ms of CPU (medians of {len(rows)} processes)"
        )


if __name__ == "__main__":
    sys.exit(main())
