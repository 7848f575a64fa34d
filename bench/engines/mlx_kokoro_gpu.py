"""MLX Kokoro on a GPU: warm-up, first audio and real-time factor alone, sentences together.

Made for the device machine of ``bench/engines/gpu_check.sh kokoro`` (MLX's CUDA backend; the
server's wheels there, piper-tts's espeak-ng for the phonemes, the int8 ONNX export under
``$VOICEWS_CACHE_DIR/kokoro``, converted there on first use). It prints, and writes to
``--out`` as it goes (a run cut short keeps what it measured):

- warm-up: a fresh process's engine (weights converted or loaded) and ``MlxKokoroEngine.warm``
  (kernels compiled: a sentence alone, two begun and decoded together); ``--startup``: only
  these, e.g. in a second process, to see what MLX's kernel cache on disk saves;
- alone, per sentence through ``synthesize``: first audio (the first piece's prosody and
  audio) and the real-time factor over the whole sentence;
- begun: N copies of a sentence's first piece, their prosody one after another against
  ``Kokoro.prosodies`` (sessions beginning a segment at once);
- batched: the same N pieces decoded together (``Decoder.batch``), per-stream compute per
  second of audio, against N = 1.

Times are medians of ``--repeats`` runs, each ending in an evaluation.

    python bench/engines/mlx_kokoro_gpu.py --out DIR             # on the GPU
    python bench/engines/mlx_kokoro_gpu.py --cpu-smoke           # here: tiny sizes, MLX's CPU
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import mlx.core as mx

from bench.engines.mlx_ops_gpu import Report, median_seconds
from voicews.engines.base import SynthesisOptions, WordStarts
from voicews.engines.kokoro.assets import DEFAULT_VOICE, load_voice, style
from voicews.engines.kokoro.mlx_engine import (
    SAMPLES_PER_FRAME,
    MlxKokoroEngine,
    Sentence,
    evaluate,
)
from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize
from voicews.engines.kokoro.timing import tail

SENTENCES = {
    "short": "Hello there.",
    "long": (
        "Your flight to Denver leaves early tomorrow morning from gate twelve, so please arrive "
        "at the airport two hours before departure and keep your boarding pass ready."
    ),
}


def first_piece(text: str) -> Sentence:
    """What the engine begins for ``text``'s first piece (as served: its end not cropped)."""
    phonemes = phonemize(text)[0]
    tokens = tokenize(phonemes)
    row = mx.array(style(load_voice(DEFAULT_VOICE), len(tokens))[0])
    return Sentence([PAD, *tokens, PAD], row, 1.0, tail(phonemes, crop=False))


def alone(engine: MlxKokoroEngine, text: str, repeats: int) -> dict[str, Any]:
    """One conversation: first audio and real-time factor through one sentence."""
    firsts, wholes, samples = [], [], 0
    for _ in range(repeats):
        start, first, samples = time.perf_counter(), 0.0, 0
        for item in engine.synthesize(text, SynthesisOptions()):
            if not isinstance(item, WordStarts):
                first = first or time.perf_counter() - start
                samples += len(item)
        firsts.append(first)
        wholes.append(time.perf_counter() - start)
    seconds = samples / engine.sample_rate
    return {
        "audio_s": round(seconds, 3),
        "first_audio_ms": round(1000 * statistics.median(firsts), 2),
        "whole_ms": round(1000 * statistics.median(wholes), 2),
        "rtf": round(statistics.median(wholes) / seconds, 5),
    }


def together(
    engine: MlxKokoroEngine, sentence: Sentence, streams: int, repeats: int
) -> dict[str, Any]:
    """``streams`` copies of one piece: prosody one after another against begun together,
    and the decoder's per-stream compute per second of audio with them decoded together."""
    model = engine.model
    prosody = engine.begin([sentence])[0]
    seconds = int(prosody.durations.sum()) * SAMPLES_PER_FRAME / engine.sample_rate
    row: dict[str, Any] = {"streams": streams, "audio_s": round(seconds, 3)}

    def one_by_one() -> None:
        evaluate([engine.begin([sentence])[0] for _ in range(streams)])

    def begun() -> None:
        evaluate(engine.begin([sentence] * streams))

    def decode() -> None:
        row_style = sentence.style[:128]
        if streams == 1:
            mx.eval(model.decoder(prosody.asr, prosody.f0, prosody.n, row_style))
            return
        copies = [[part] * streams for part in (prosody.asr, prosody.f0, prosody.n)]
        mx.eval(*model.decoder.batch(*copies, mx.stack([row_style] * streams)))

    row["prosody_alone_ms"] = round(1000 * median_seconds(one_by_one, repeats), 2)
    if streams > 1:
        begun()  # this shape's kernels compiled before it is timed
        row["prosody_together_ms"] = round(1000 * median_seconds(begun, repeats), 2)
    decode()
    took = median_seconds(decode, repeats)
    row["decode_ms"] = round(1000 * took, 2)
    row["decode_rtf_per_stream"] = round(took / (streams * seconds), 5)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--startup", action="store_true", help="only the cold start and warm-up")
    parser.add_argument("--sentences", nargs="+", default=list(SENTENCES), choices=SENTENCES)
    parser.add_argument(
        "--cpu-smoke", action="store_true", help="MLX's CPU backend, 'short', N = 1 and 2"
    )
    args = parser.parse_args()
    if args.cpu_smoke:
        os.environ["VOICEWS_MLX_DEVICE"] = "cpu"
        args.repeats, args.streams, args.sentences = 1, [1, 2], ["short"]
    os.environ.setdefault("VOICEWS_MLX_DECODE", "whole")  # batched wherever it runs
    report = Report(args.out, "mlx_kokoro_gpu.json")
    start = time.perf_counter()
    engine = MlxKokoroEngine()
    built = time.perf_counter() - start
    report.add("startup", {"device": engine.device, "built_s": round(built, 2)})
    report.add("warm_s", round(engine.warm(), 2))
    if args.startup:
        return
    for label in args.sentences:
        report.add(f"alone_{label}", alone(engine, SENTENCES[label], args.repeats))
        sentence = first_piece(SENTENCES[label])
        for n in args.streams:
            report.add(f"together_{label}_{n}", together(engine, sentence, n, args.repeats))


if __name__ == "__main__":
    sys.exit(main())
