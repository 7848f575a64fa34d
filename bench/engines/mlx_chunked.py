"""The mlx-piper engine's chunked decode: first-window compute, real-time factor, join quality.

For one long sentence of the bundled voice (or ``--voice``), on each MLX device present:

- the compute before the first audio window (encoder, durations, first window) against the
  compute before the whole segment, as a ratio, for the default streaming decode;
- the real-time factor (compute seconds per second of audio) of the one-shot decode, the
  streaming decode (state carried across windows, exact) and the overlap decode (windows
  decoded alone with context, crossfaded), over window sizes;
- SNR against the one-shot decode and the largest sample step at window joins, over overlaps;
- the first upsampling layer four ways: ``conv_transpose1d``, zero-stuffing + ``conv1d``, and
  polyphase as one native ``conv1d`` or as one matmul per tap.

    python -m bench mlx_chunked                       # CPU here (~3 min), GPU too where MLX has one
    python -m bench mlx_chunked --repeats 3 --json mlx.json

Every timing evaluates its MLX arrays (``mx.eval``) inside the timed region, and is the best
of ``--repeats`` runs of wall-clock time. Needs ``mlx`` (``pip install 'mlx[cpu]'`` on Linux)
and, for the first conversion of a voice, ``onnx``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from bench.engines.measures import join_jumps, snr_db
from voicews.engines.mlx_piper.decode import overlap_windows, streaming_windows, window_plan
from voicews.engines.mlx_piper.engine import MlxConfig, MlxPiperEngine
from voicews.engines.mlx_piper.layers import Upsample
from voicews.engines.mlx_piper.model import PiperVits

LONG_SENTENCE = (
    "Your flight to Denver leaves early tomorrow morning from gate twelve, so please arrive at "
    "the airport two hours before departure and keep your boarding pass ready at security."
)


def best(fn: Callable[[], object], repeats: int) -> float:
    """Best wall-clock seconds of ``fn`` (which must evaluate what it computes)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def cpu_seconds(fn: Callable[[], object]) -> float:
    """Process CPU seconds of ``fn``: steadier than wall time on a shared machine."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def devices() -> list[mx.DeviceType]:
    found = [mx.cpu]
    if mx.metal.is_available() or mx.cuda.is_available():
        found.append(mx.gpu)
    return found


def timed_windows(windows: Iterator[mx.array]) -> tuple[list[float], list[mx.array]]:
    """Seconds from the start until each window was evaluated, and the windows."""
    start = time.perf_counter()
    marks, pieces = [], []
    for piece in windows:  # each window is evaluated before it is yielded
        marks.append(time.perf_counter() - start)
        pieces.append(piece)
    return marks, pieces


def upsample_layer(model: PiperVits, frames: int, repeats: int) -> dict[str, Any]:
    """Piper's first upsampling layer (x8) on ``frames`` latent frames, four ways."""
    up = model.generator.ups[0]
    weight = model.weights["dec.ups.0.weight"]  # (O, K, I)
    bias = model.weights["dec.ups.0.bias"]
    stride, padding = up.stride, up.padding
    x = mx.random.normal((1, frames, int(weight.shape[2])), key=mx.random.key(0))
    mx.eval(x)
    # mx.conv_transpose1d wants (O, K, I) and flips the kernel as PyTorch does.
    reference = mx.conv_transpose1d(x, weight, stride=stride, padding=padding)[0] + bias
    mx.eval(reference)

    def stuffed() -> mx.array:
        batch, length, channels = x.shape
        z = mx.concatenate([x[:, :, None, :], mx.zeros((batch, length, stride - 1, channels))], 2)
        z = z.reshape(batch, length * stride, channels)
        k = int(weight.shape[1])
        z = mx.pad(z, [(0, 0), (k - 1 - padding, k - 1 - padding - (stride - 1)), (0, 0)])
        return mx.conv1d(z, weight[:, ::-1, :])[0] + bias

    variants: dict[str, Callable[[], mx.array]] = {
        "conv_transpose1d": lambda: (
            mx.conv_transpose1d(x, weight, stride=stride, padding=padding)[0] + bias
        ),
        "zero_stuff_conv1d": stuffed,
        "polyphase_conv1d": lambda: Upsample(weight, bias, stride, padding, matmul=False)(x[0]),
        "polyphase_matmul": lambda: Upsample(weight, bias, stride, padding, matmul=True)(x[0]),
    }
    out: dict[str, Any] = {"frames": frames}
    for name, fn in variants.items():
        y = fn()
        mx.eval(y)
        err = float(mx.max(mx.abs(y - reference)))
        out[name] = {"seconds": best(lambda f=fn: mx.eval(f()), repeats), "max_abs_err": err}
    return out


def bench_device(
    engine: MlxPiperEngine, device: mx.DeviceType, ids: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    mx.set_default_device(device)
    rows: dict[str, Any] = {"device": "cpu" if device == mx.cpu else "gpu"}
    hop, rate, repeats = engine.model.hop, engine.sample_rate, args.repeats
    weights = engine.model.weights
    model = engine.model if device == mx.cpu else PiperVits(weights, matmul=False)
    alt = PiperVits(weights, matmul=device != mx.cpu)

    def front() -> mx.array:
        latents = model.latents(
            ids, noise_scale=0.667, length_scale=1.0, noise_w=0.8, rng=np.random.default_rng(0)
        )
        mx.eval(latents.z_p)
        return latents.z_p

    z_p = front()
    frames = int(z_p.shape[0])
    audio_s = frames * hop / rate
    encode_s = best(front, repeats)
    encode_cpu = cpu_seconds(front)
    oneshot = model.decode(z_p)
    mx.eval(oneshot)
    oneshot_s = best(lambda: mx.eval(model.decode(z_p)), repeats)
    oneshot_cpu = cpu_seconds(lambda: mx.eval(model.decode(z_p)))
    alt_s = best(lambda: mx.eval(alt.decode(z_p)), 1)
    rows.update(
        phonemes=len(ids),
        frames=frames,
        audio_seconds=audio_s,
        encoder_durations_s=encode_s,
        oneshot_decode_s=oneshot_s,
        oneshot_rtf=(encode_s + oneshot_s) / audio_s,
        oneshot_cpu_rtf=(encode_cpu + oneshot_cpu) / audio_s,
        oneshot_decode_other_conv_s=alt_s,
        conv=("matmul per tap" if device == mx.cpu else "native conv1d"),
    )
    reference = np.array(oneshot)

    default = MlxConfig()
    configs = [(chunk, default.initial_chunk_frames) for chunk in args.chunks]
    configs += [(default.chunk_frames, i) for i in args.initials]
    sweeps = []
    for chunk, initial in dict.fromkeys(configs):
        plan = window_plan(frames, chunk, initial)
        runs = []
        for _ in range(repeats):
            cpu_start = time.process_time()
            marks, pieces = timed_windows(streaming_windows(model, z_p, plan))
            runs.append((marks, time.process_time() - cpu_start))
        marks = min(runs, key=lambda r: r[0][-1])[0]
        cpu = min(r[1] for r in runs)
        audio = np.concatenate([np.array(p) for p in pieces])
        first, whole = encode_s + marks[0], encode_s + marks[-1]
        sweeps.append(
            {
                "decode": "stream",
                "chunk_frames": chunk,
                "initial_frames": initial,
                "windows": len(plan),
                "first_window_s": first,
                "whole_segment_s": whole,
                "first_over_whole": first / whole,
                "rtf": whole / audio_s,
                "cpu_rtf": (encode_cpu + cpu) / audio_s,
                "first_audio_seconds": plan[0][1] * hop / rate,
                "snr_db": snr_db(audio, reference),
            }
        )
    rows["stream"] = sweeps

    overlaps = []
    chunk, initial = default.chunk_frames, default.initial_chunk_frames
    plan = window_plan(frames, chunk, initial)
    for overlap in args.overlaps:
        cpu_start = time.process_time()
        marks, pieces = timed_windows(overlap_windows(model, z_p, plan, overlap))
        cpu = time.process_time() - cpu_start
        audio = np.concatenate([np.array(p) for p in pieces])
        radius = 4 * hop  # the default crossfade's half width, and more
        jump, excess = join_jumps(audio, reference, plan, hop, radius)
        overlaps.append(
            {
                "decode": "overlap",
                "overlap_frames": overlap,
                "chunk_frames": chunk,
                "initial_frames": initial,
                "first_window_s": encode_s + marks[0],
                "whole_segment_s": encode_s + marks[-1],
                "rtf": (encode_s + marks[-1]) / audio_s,
                "cpu_rtf": (encode_cpu + cpu) / audio_s,
                "snr_db": snr_db(audio, reference),
                "max_join_step": jump,
                "join_step_excess": excess,
            }
        )
    stream_audio = np.concatenate([np.array(p) for p in streaming_windows(model, z_p, plan)])
    jump, excess = join_jumps(stream_audio, reference, plan, hop, 0)
    rows["overlap"] = overlaps
    rows["stream_joins"] = {
        "max_join_step": jump,
        "join_step_excess": excess,
        "reference_max_step": join_jumps(reference, reference, plan, hop, 0)[0],
    }
    rows["upsample_layer"] = upsample_layer(model, args.upsample_frames, repeats)
    return rows


def print_device(rows: dict[str, Any]) -> None:
    print(
        f"\n== {rows['device']} ({rows['conv']}): {rows['phonemes']} phonemes, "
        f"{rows['frames']} frames, {rows['audio_seconds']:.2f} s of audio"
    )
    print(
        f"encoder + durations {rows['encoder_durations_s']:.3f} s; one-shot decode "
        f"{rows['oneshot_decode_s']:.3f} s (other conv: {rows['oneshot_decode_other_conv_s']:.3f}"
        f" s); one-shot RTF {rows['oneshot_rtf']:.2f} (CPU time {rows['oneshot_cpu_rtf']:.2f})"
    )
    print("stream   chunk initial windows  first_s  whole_s first/whole   RTF  cpuRTF    SNR")
    for r in rows["stream"]:
        print(
            f"        {r['chunk_frames']:6d} {r['initial_frames']:7d} {r['windows']:7d} "
            f"{r['first_window_s']:8.3f} {r['whole_segment_s']:8.3f} {r['first_over_whole']:11.3f}"
            f" {r['rtf']:5.2f} {r['cpu_rtf']:7.2f} {r['snr_db']:6.1f}"
        )
    print("overlap  frames  first_s  whole_s   RTF  cpuRTF  SNR_dB  max_join_step  excess")
    for r in rows["overlap"]:
        print(
            f"        {r['overlap_frames']:6d} {r['first_window_s']:8.3f}"
            f" {r['whole_segment_s']:8.3f} {r['rtf']:5.2f} {r['cpu_rtf']:7.2f} {r['snr_db']:7.1f}"
            f" {r['max_join_step']:14.4f} {r['join_step_excess']:7.4f}"
        )
    j = rows["stream_joins"]
    print(
        f"stream joins: max step {j['max_join_step']:.4f} (one-shot there: "
        f"{j['reference_max_step']:.4f}), excess {j['join_step_excess']:.6f}"
    )
    up = rows["upsample_layer"]
    print(f"first upsampling layer on {up['frames']} frames:")
    for name in ("conv_transpose1d", "zero_stuff_conv1d", "polyphase_conv1d", "polyphase_matmul"):
        print(
            f"  {name:18s} {up[name]['seconds']:.3f} s  (max |err| {up[name]['max_abs_err']:.1e})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voice", help="a Piper .onnx (default: the bundled voice)")
    parser.add_argument("--text", default=LONG_SENTENCE)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--chunks", type=lambda s: [int(x) for x in s.split(",")], default=[16, 32, 64, 128]
    )
    parser.add_argument(
        "--initials", type=lambda s: [int(x) for x in s.split(",")], default=[4, 16]
    )
    parser.add_argument(
        "--overlaps",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[0, 8, 16, MlxConfig().overlap_frames, 32],
    )
    parser.add_argument("--upsample-frames", type=int, default=400)
    parser.add_argument("--cache-dir", type=Path, help="weights cache (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        engine = MlxPiperEngine(args.voice, cache_dir=args.cache_dir or Path(tmp), seed=0)
        sentences = engine.phoneme_ids(args.text)
        ids = max(sentences, key=len)
        results = []
        for device in devices():
            rows = bench_device(engine, device, ids, args)
            print_device(rows)
            results.append(rows)
    if args.json:
        args.json.write_text(
            json.dumps(
                results,
                indent=2,
                default=lambda v: None if isinstance(v, float) and math.isinf(v) else str(v),
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
