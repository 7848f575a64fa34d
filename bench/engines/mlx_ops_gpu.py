"""The MLX Piper decoders on a GPU: first audio, real-time factor alone and batched, warm-up.

Made for the device machine of ``bench/engines/gpu_check.sh`` (MLX's CUDA backend, no piper-tts, no
pydantic): it needs only MLX, numpy, the converted voice (``--weights``: the safetensors file
``voicews`` writes under ``$VOICEWS_CACHE_DIR/mlx-piper``) and phoneme ids prepared here
(``--prepare``, which does need the engine's phonemizer). It prints, and writes to ``--out``
as it goes (a run cut short keeps what it measured):

- warm-up: a fresh process's first window (kernel compilation), then ``WindowDecoder.warm``
  over every bucket at batch size 1 (``--startup``: only these, e.g. in a second process,
  to see what MLX's kernel cache on disk saves); each batch size's first call is timed below;
- alone, per sentence: first audio (encoder and durations, then the first window) and the
  real-time factor through the whole sentence, shipped (streaming decoder) against now
  (whole windows, compiled), and now with the first window as large as the rest;
- begun: N sentences' encoder, durations and flow, each alone against all in one batch
  (sessions beginning a segment at once), at the same N;
- batched: 64-frame windows of N streams decoded in one call, per-stream compute per
  second of audio, at N = 1, 4, 16, 64, 256 (float32, and float16 with its SNR).

Times are medians of ``--repeats`` runs, each ending in an evaluation.

    python bench/engines/mlx_ops_gpu.py --prepare bench/engines/mlx_ops_gpu_ids.json  # here
    python bench/engines/mlx_ops_gpu.py --weights DIR_OR_FILE --out DIR  # on the GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from voicews.engines.mlx_piper.decode import streaming_windows, window_plan
from voicews.engines.mlx_piper.model import PiperVits
from voicews.engines.mlx_piper.weights import read_converted
from voicews.engines.mlx_piper.windows import Window, WindowDecoder, buckets_for

IDS = Path(__file__).with_name("mlx_ops_gpu_ids.json")
SENTENCES = {
    "short": "Hello there.",
    "long": (
        "Your flight to Denver leaves early tomorrow morning from gate twelve, so please arrive "
        "at the airport two hours before departure and keep your boarding pass ready."
    ),
}
SCALES = {"noise_scale": 0.667, "length_scale": 1.0, "noise_w": 0.8}


def prepare(path: Path) -> None:
    from voicews.engines.mlx_piper import MlxPiperEngine

    engine = MlxPiperEngine()
    ids = {name: engine.phoneme_ids(text)[0] for name, text in SENTENCES.items()}
    path.write_text(json.dumps({"sample_rate": engine.sample_rate, "ids": ids}) + "\n")


def decoder_input(model: PiperVits, z_p: mx.array) -> np.ndarray:
    """The flow over the whole sentence, as the engine runs it before the first window."""
    z = model.flow.reverse(z_p)
    mx.eval(z)
    return np.array(z)


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Report:
    """Rows printed and rewritten to ``out/{name}`` after each."""

    def __init__(self, out: Path | None, name: str = "mlx_ops_gpu.json") -> None:
        self.out, self.name = out, name
        self.rows: dict[str, Any] = {"device": str(mx.default_device())}

    def add(self, key: str, value: Any) -> None:
        self.rows[key] = value
        print(f"{key}: {json.dumps(value)}", flush=True)
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / self.name).write_text(json.dumps(self.rows, indent=2))


def alone(
    model: PiperVits,
    decoder: WindowDecoder,
    ids: list[int],
    rate: int,
    repeats: int,
    initial: int,
    stream: bool,
) -> dict[str, Any]:
    """One conversation: first audio and real-time factor through one sentence."""
    firsts, wholes = [], []
    frames = 0
    for _ in range(repeats):
        start = time.perf_counter()
        latents = model.latents(ids, rng=np.random.default_rng(0), **SCALES)
        frames = int(latents.z_p.shape[0])
        plan = window_plan(frames, 64, initial)
        first = None
        if stream:
            for audio in streaming_windows(model, latents.z_p, plan):
                first = first or time.perf_counter() - start
                np.array(audio)
        else:
            z = decoder_input(model, latents.z_p)
            for a, b in plan:
                decoder.decode([Window(z, a, b)])
                first = first or time.perf_counter() - start
        firsts.append(first or 0.0)
        wholes.append(time.perf_counter() - start)
    seconds = frames * model.hop / rate
    return {
        "audio_s": round(seconds, 3),
        "windows": len(window_plan(frames, 64, initial)),
        "first_audio_ms": round(1000 * statistics.median(firsts), 2),
        "whole_ms": round(1000 * statistics.median(wholes), 2),
        "rtf": round(statistics.median(wholes) / seconds, 5),
    }


def batched(
    decoder: WindowDecoder, z: np.ndarray, streams: int, rate: int, repeats: int
) -> dict[str, Any]:
    """``streams`` 64-frame windows (inside the sentence, at different places) in one call."""
    starts = [64 + (i * 7) % max(1, z.shape[0] - 64 - 64 - 64) for i in range(streams)]
    windows = [Window(z, s, s + 64) for s in starts]
    first = median_seconds(lambda: decoder.decode(windows), 1)  # compiles this batch size
    seconds = median_seconds(lambda: decoder.decode(windows), repeats)
    audio = 64 * decoder.hop / rate
    return {
        "streams": streams,
        "first_call_s": round(first, 3),
        "batch_ms": round(1000 * seconds, 3),
        "per_stream_window_ms": round(1000 * seconds / streams, 4),
        "per_stream_rtf": round(seconds / streams / audio, 6),
        "streams_in_real_time": int(streams * audio / seconds),
    }


def begun(model: PiperVits, sentences: list[list[int]], repeats: int) -> dict[str, Any]:
    """``len(sentences)`` sentences begun at once (their encoder, durations and flow): each
    alone after the other, against all of them in one batch (``PiperVits.decoder_inputs``,
    what the batched lane runs for sessions that begin together)."""
    rngs = [np.random.default_rng(i) for i in range(len(sentences))]

    def each_alone() -> None:
        for ids, rng in zip(sentences, rngs, strict=True):
            decoder_input(model, model.latents(ids, rng=rng, **SCALES).z_p)

    def together() -> None:
        model.decoder_inputs(
            sentences,
            noise_scale=SCALES["noise_scale"],
            length_scales=[SCALES["length_scale"]] * len(sentences),
            noise_w=SCALES["noise_w"],
            rngs=rngs,
        )

    together()  # compiles this batch's kernels
    alone_s, together_s = median_seconds(each_alone, repeats), median_seconds(together, repeats)
    return {
        "sentences": len(sentences),
        "alone_ms": round(1000 * alone_s, 2),
        "together_ms": round(1000 * together_s, 2),
        "speedup": round(alone_s / together_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prepare", type=Path, help="write phoneme ids here and stop")
    parser.add_argument("--weights", type=Path, help="converted voice: file or its folder")
    parser.add_argument("--ids", type=Path, default=IDS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    parser.add_argument("--startup", action="store_true", help="only the cold start and warm-up")
    parser.add_argument("--sentences", nargs="+", default=list(SENTENCES), choices=SENTENCES)
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="MLX's CPU backend, the short sentence alone, batches of 1 and 2, one repeat, "
        "the converted voice from $VOICEWS_CACHE_DIR: that the script runs, not figures",
    )
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return
    if args.cpu_smoke:
        from voicews.cache import cache_dir

        mx.set_default_device(mx.cpu)
        args.batches, args.repeats, args.sentences = [1, 2], 1, ["short"]
        args.weights = args.weights or cache_dir() / "mlx-piper"
    if args.weights is None:
        parser.error("--weights is needed")
    path = args.weights
    if path.is_dir():
        path = sorted(path.rglob("*.safetensors"))[-1]
    prepared = json.loads(args.ids.read_text())
    rate, ids = int(prepared["sample_rate"]), prepared["ids"]
    report = Report(args.out)

    start = time.perf_counter()
    model = PiperVits(read_converted(path))
    decoder = WindowDecoder(model, buckets_for(64, 8), max_batch=max(args.batches))
    latents = model.latents(ids["short"], rng=np.random.default_rng(0), **SCALES)
    z = decoder_input(model, latents.z_p)
    decoder.decode([Window(z, 0, min(8, z.shape[0]))])
    report.add("cold_first_window_s", round(time.perf_counter() - start, 2))
    report.add("warm_batch_1_s", round(decoder.warm((1,)), 2))
    if args.startup:
        return

    for name in args.sentences:
        sentence = ids[name]
        rows = {}
        for label, initial, stream in (
            ("shipped_stream", 8, True),
            ("whole", 8, False),
            ("whole_first_window_64", 64, False),
        ):
            repeats = 1 if stream else args.repeats
            alone(model, decoder, sentence, rate, 1, initial, stream)  # warm this sentence
            rows[label] = alone(model, decoder, sentence, rate, repeats, initial, stream)
        report.add(f"alone_{name}", rows)

    for streams in args.batches:  # sessions beginning a segment at once
        sentences = [ids[list(ids)[i % len(ids)]] for i in range(streams)]
        report.add(f"begun_{streams}", begun(model, sentences, args.repeats))

    long = model.latents(ids["long"], rng=np.random.default_rng(0), **SCALES)
    z = decoder_input(model, long.z_p)
    half = WindowDecoder(model, decoder.buckets, max_batch=max(args.batches), dtype=mx.float16)
    for dtype, dec in (("float32", decoder), ("float16", half)):
        for streams in args.batches:
            report.add(f"batched_{dtype}_{streams}", batched(dec, z, streams, rate, args.repeats))
    window = [Window(z, 100, 164)]
    full, low = decoder.decode(window)[0], half.decode(window)[0]
    snr = 10 * np.log10(np.sum(full.astype(np.float64) ** 2) / np.sum((full - low) ** 2))
    report.add("float16_snr_db", round(float(snr), 1))


if __name__ == "__main__":
    sys.exit(main())
