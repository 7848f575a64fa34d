"""The mlx-kokoro engine, component by component, beside the onnxruntime engine in one run.

For one text (``--text``, default a two-sentence agent reply), on each MLX device present:

- seconds per component of each piece the model speaks: ALBERT, the duration encoder (three
  BiLSTMs), durations (one more), F0 and energy (a BiLSTM over frames, six residual blocks),
  the text encoder, then the decoder's frame-rate blocks, the harmonic source and its STFT,
  the generator (two upsamplings and twelve residual blocks at 800 and 4,800 frames per
  second of audio) and the inverse STFT; the decoder's multiply-adds per second of audio and
  the rate the decoder reaches, and the decoder on 16 frames with its convolutions as one
  matmul per kernel tap (the CPU default) and as MLX's own ``conv1d``;
- the whole engine's real-time factor (compute seconds per second of audio) and CPU seconds
  per second of audio, against ``--engine kokoro`` (onnxruntime, int8) on the same text.

    python -m bench mlx_kokoro                      # CPU here (~5 min on 2 busy cores)
    python -m bench mlx_kokoro --quick              # one short sentence (~1 min)
    python -m bench mlx_kokoro --repeats 3 --json mlx-kokoro.json

Every MLX timing evaluates its arrays (``mx.eval``) inside the timed region and is the best of
``--repeats`` wall-clock runs. On a Mac, run it as is: MLX's GPU is then measured too, with
MLX's own convolutions (the CPU path computes them as one matmul per kernel tap).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from bench.common import json_safe, source_version
from voicews.engines.base import SynthesisOptions, WordStarts
from voicews.engines.kokoro.assets import (
    DEFAULT_VOICE,
    SAMPLE_RATE,
    load_voice,
    model_path,
    style,
)
from voicews.engines.kokoro.engine import KokoroEngine
from voicews.engines.kokoro.mlx_engine import MlxKokoroEngine
from voicews.engines.kokoro.mlx_model import Kokoro
from voicews.engines.kokoro.mlx_weights import load_weights
from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize

TEXT = (
    "Sure, I can help with that. Your order shipped on Monday and should arrive in two to "
    "three business days."
)
QUICK_TEXT = "Hello there, how can I help?"


def best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Best wall-clock seconds of ``fn`` (which evaluates what it computes), and its result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def evaluated(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        out = fn()
        mx.eval(out)
        return out

    return run


def decoder_macs_per_frame(weights: dict[str, mx.array]) -> float:
    """Multiply-adds of the decoder per predicted frame (600 samples), from its conv weights:
    each convolution's ``out * k * in`` times the frames per second it runs at."""
    rate = {  # output samples per predicted frame, by module prefix
        "decoder.encode.": 1,
        "decoder.asr_res.": 1,
        "decoder.decode.0.": 1,
        "decoder.decode.1.": 1,
        "decoder.decode.2.": 1,
        "decoder.decode.3.": 2,
        "decoder.generator.noise_convs.0.": 20,
        "decoder.generator.noise_res.0.": 20,
        "decoder.generator.resblocks.0.": 20,
        "decoder.generator.resblocks.1.": 20,
        "decoder.generator.resblocks.2.": 20,
        "decoder.generator.noise_convs.1.": 120,
        "decoder.generator.noise_res.1.": 120,
        "decoder.generator.resblocks.3.": 120,
        "decoder.generator.resblocks.4.": 120,
        "decoder.generator.resblocks.5.": 120,
        "decoder.generator.conv_post.": 120,
        "decoder.generator.ups.0.": 2,  # per input frame: k/stride taps per output
        "decoder.generator.ups.1.": 20,
    }
    total = 0.0
    for name, w in weights.items():
        if w.ndim != 3 or not name.endswith(".weight"):
            continue
        prefix = next((p for p in rate if name.startswith(p)), None)
        if prefix is not None:
            total += float(np.prod(w.shape)) * rate[prefix]
    return total


def components(
    model: Kokoro, pieces: list[list[int]], pack: np.ndarray, repeats: int
) -> dict[str, float]:
    """Seconds per component, summed over the text's pieces."""
    seconds: dict[str, float] = {}

    def add(name: str, fn: Callable[[], Any]) -> Any:
        elapsed, out = best(evaluated(fn), repeats)
        seconds[name] = seconds.get(name, 0.0) + elapsed
        return out

    for tokens in pieces:
        piece(model, tokens, mx.array(style(pack, len(tokens) - 2)[0]), add)
    return seconds


def piece(model: Kokoro, tokens: list[int], row: mx.array, add: Callable[..., Any]) -> None:
    """Each component of one piece in turn, each fed the previous ones' results."""
    s, ids = row[128:], mx.array(tokens, dtype=mx.int32)
    p, d, g = model.predictor, model.decoder, model.decoder.generator
    bert = add("albert", lambda: model.bert(ids))
    features = add("duration_encoder", lambda: p.features(bert, s))
    durations = add("durations", lambda: p.durations(features))
    frames = np.maximum(np.round(np.array(durations)), 1).astype(np.int64)
    index = mx.array(np.repeat(np.arange(len(tokens)), frames).astype(np.int32))
    f0, n = add("f0_energy", lambda: p.f0_n(features[index], s))
    asr = add("text_encoder", lambda: model.text_encoder(ids)[index])
    styles = d.styles(row[:128])
    x = add("decoder_frames", lambda: d.hidden(asr, f0, n, styles))
    harmonics = add("harmonics_stft", lambda: g.harmonics(f0))
    spectrum = add("generator", lambda: g.spectrum(x, styles, harmonics))
    add("inverse_stft", lambda: g.stft.inverse(spectrum))


def conv_ways(
    weights: dict[str, mx.array], tokens: list[int], row: mx.array, repeats: int
) -> dict[str, float]:
    """The decoder on (at most) 16 frames of ``tokens``, with one matmul per kernel tap and
    with MLX's own ``conv1d``: seconds each."""
    ways = {"matmul_per_tap": Kokoro(weights, matmul=True), "conv1d": Kokoro(weights, matmul=False)}
    prosody = ways["matmul_per_tap"].prosody(tokens, row)
    frames = min(16, int(prosody.asr.shape[0]))
    asr, f0, n = prosody.asr[:frames], prosody.f0[: 2 * frames], prosody.n[: 2 * frames]
    out = {}
    for name, model in ways.items():
        out[name] = best(evaluated(lambda m=model: m.decoder(asr, f0, n, row[:128])), repeats)[0]
    return out


def engine_run(engine: Any, text: str, voice: str, repeats: int) -> dict[str, float]:
    """Wall and CPU seconds of a whole ``synthesize`` (best of ``repeats``), and audio seconds."""
    runs = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = list(engine.synthesize(text, SynthesisOptions(voice=voice)))
        runs.append((time.perf_counter() - wall, time.process_time() - cpu, out))
    wall, cpu, out = min(runs, key=lambda r: r[0])
    samples = sum(len(a) for a in out if not isinstance(a, WordStarts))
    audio = samples / SAMPLE_RATE
    return {"seconds": wall, "audio_seconds": audio, "rtf": wall / audio, "cpu_rtf": cpu / audio}


def devices() -> list[mx.DeviceType]:
    found = [mx.cpu]
    if mx.metal.is_available() or mx.cuda.is_available():
        found.append(mx.gpu)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", default=None)
    parser.add_argument("--quick", action="store_true", help=f"speak {QUICK_TEXT!r}")
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    text = args.text or (QUICK_TEXT if args.quick else TEXT)
    pack = load_voice(args.voice)
    pieces = [[PAD, *tokenize(p), PAD] for p in phonemize(text)]
    weights = load_weights(model_path())
    macs = decoder_macs_per_frame(weights)
    report: dict[str, Any] = {
        "source": source_version(),
        "text": text,
        "voice": args.voice,
        "tokens": [len(p) for p in pieces],
        "decoder_gmac_per_audio_second": macs * SAMPLE_RATE / 600 / 1e9,
        "devices": [],
    }
    ort = engine_run(KokoroEngine(args.voice), text, args.voice, args.repeats)
    report["onnxruntime"] = ort
    print(f"{text!r}: {sum(report['tokens'])} tokens in {len(pieces)} piece(s), {args.voice}")
    print(f"onnxruntime int8: RTF {ort['rtf']:.3f}, CPU s per audio s {ort['cpu_rtf']:.3f}")
    for device in devices():
        mx.set_default_device(device)
        name = "cpu" if device == mx.cpu else "gpu"
        model = Kokoro(weights, matmul=device == mx.cpu)
        parts = components(model, pieces, pack, args.repeats)
        whole = engine_run(MlxKokoroEngine(args.voice), text, args.voice, args.repeats)
        audio = whole["audio_seconds"]
        decoder_s = parts["decoder_frames"] + parts["generator"] + parts["inverse_stft"]
        first = pieces[0]
        convs = conv_ways(weights, first, mx.array(style(pack, len(first) - 2)[0]), args.repeats)
        row = {
            "device": name,
            "conv": "matmul per tap" if device == mx.cpu else "native conv1d",
            "components_s": parts,
            "components_share": {k: v / sum(parts.values()) for k, v in parts.items()},
            "decoder_gmac_per_s": macs * audio * SAMPLE_RATE / 600 / 1e9 / decoder_s,
            "decoder_16_frames_s": convs,
            "whole": whole,
            "rtf_over_onnxruntime": whole["rtf"] / ort["rtf"],
        }
        report["devices"].append(row)
        print(f"\nMLX {name} ({row['conv']}), {audio:.2f} s of audio:")
        for key, value in parts.items():
            share = row["components_share"][key]
            print(f"  {key:<17} {value:8.3f} s  {100 * share:5.1f}%")
        print(
            f"  decoder: {report['decoder_gmac_per_audio_second']:.1f} GMAC per audio second, "
            f"{row['decoder_gmac_per_s']:.2f} GMAC/s reached"
        )
        print(
            f"  decoder on 16 frames: {convs['matmul_per_tap']:.2f} s with a matmul per tap, "
            f"{convs['conv1d']:.2f} s with MLX's conv1d"
        )
        print(
            f"  whole engine: RTF {whole['rtf']:.2f}, CPU s per audio s {whole['cpu_rtf']:.2f}, "
            f"{row['rtf_over_onnxruntime']:.1f}x onnxruntime's RTF"
        )
    if args.json:
        args.json.write_text(json.dumps(json_safe(report), indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
