"""Kokoro against Piper in one run: the engines alone, then the service, then Kokoro's decoder
run in windows.

    python -m bench kokoro                        # ~10 min on 2 cores
    python -m bench kokoro --repeats 1 --replies 1 --lengths 12,60   # smoke run

1. Engines alone (no server): synthesis time per text length, median over repeats; the fit
   ``ms = fixed + per_char * chars`` says what a segment of N characters costs before its
   first audio (both engines render a sentence whole).
2. The service (in-process server, one per engine, one after the other): the agent replies
   streamed as word pieces at ``--rates``: first audio (first delta -> first frame), stalls a
   real-time listener hears, RTF (first delta -> turn_done over audio), and the process's CPU
   time per second of audio.
3. Kokoro's decoder in windows: the graph cut before the decoder (``onnx.utils.Extractor``);
   the first window of frames (with right context) against the whole decode: time, and how
   close its audio is (the decoder normalizes each channel over the whole utterance, so a
   window cannot match the whole exactly).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import REPLIES, json_safe, rate_list, source_version
from bench.latency.ttfa import Run, Summary, measure_rate, warm_up
from voicews.engines import engine_factory
from voicews.engines.base import SynthesisOptions
from voicews.server import ServerConfig, VoicewsServer

ENGINES = ("piper", "kokoro")
SOURCE = " ".join(REPLIES)


def texts(lengths: Sequence[int]) -> list[str]:
    """Prefixes of the replies cut at a word end near each length, as the segmenter cuts."""
    out = []
    for length in lengths:
        cut = SOURCE.rfind(" ", 0, length + 1)
        out.append(SOURCE[: cut if cut > 0 else length])
    return out


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def engine_costs(name: str, samples: list[str], repeats: int) -> list[dict[str, float]]:
    engine = engine_factory(name)()
    list(engine.synthesize("Warming up.", SynthesisOptions()))
    rows = []
    for text in samples:

        def run(text: str = text) -> int:
            chunks = engine.synthesize(text, SynthesisOptions())
            return sum(len(c) for c in chunks if isinstance(c, np.ndarray))

        seconds, samples_out = timed(run, repeats)
        audio = samples_out / engine.sample_rate
        rows.append({"chars": len(text), "ms": seconds * 1000, "audio_s": audio,
                     "rtf": seconds / audio})  # fmt: skip
    return rows


def fit(rows: list[dict[str, float]]) -> tuple[float, float]:
    """Least squares ``ms = fixed + per_char * chars``."""
    chars = np.array([r["chars"] for r in rows], dtype=float)
    ms = np.array([r["ms"] for r in rows])
    if len(rows) < 2:
        return float("nan"), float(ms[0] / chars[0])
    per_char, fixed = np.polyfit(chars, ms, 1)
    return float(fixed), float(per_char)


async def service(name: str, rates: list[float], replies: int, repeats: int) -> dict[str, Any]:
    server = VoicewsServer(replace(ServerConfig(port=0), engine=name))
    await server.start()
    try:
        await warm_up(server.url)
        out: dict[str, Any] = {}
        for rate in rates:
            cpu = time.process_time()
            runs: list[Run] = await measure_rate(
                server.url, rate, REPLIES[:replies], repeats, per_run_connection=False
            )
            cpu = time.process_time() - cpu
            audio = sum(r.audio_s for r in runs)
            out[f"{rate:g}"] = {
                "summary": Summary.of(runs),
                "cpu_ms_per_audio_s": 1000 * cpu / audio if audio else float("nan"),
                "first_segments": [r.segment_texts[0] for r in runs if r.segment_texts],
            }
        return out
    finally:
        await server.close()


def decoder_windows(windows: Sequence[int], context: int, repeats: int) -> dict[str, Any]:
    """Kokoro's decoder alone on the first ``window`` frames (+ ``context`` to the right),
    against the decoder on the whole utterance."""
    import onnx
    import onnxruntime
    from onnx.utils import Extractor

    from voicews.engines.kokoro.assets import load_voice, model_path, style
    from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize

    # The decoder's inputs: aligned text features, F0 and energy curves (2 per frame), style.
    asr, f0, energy = (
        "/encoder/MatMul_1_output_0", "/encoder/Reshape_1_output_0", "/encoder/Reshape_output_0"
    )  # fmt: skip
    model = onnx.load(str(model_path()))
    decoder = Extractor(model).extract_model([asr, f0, energy, "style"], ["audio"])
    for name in (asr, f0, energy):
        model.graph.output.append(
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        )
    cpu = ["CPUExecutionProvider"]
    whole_model = onnxruntime.InferenceSession(model.SerializeToString(), providers=cpu)
    decode = onnxruntime.InferenceSession(decoder.SerializeToString(), providers=cpu)
    text = ". ".join(REPLIES[0].split(". ")[:2]) + "."  # two sentences, one inference: 7 s
    tokens = tokenize(" ".join(phonemize(text)))
    feeds = {
        "tokens": np.array([[PAD, *tokens, PAD]]),
        "style": style(load_voice("af_heart"), len(tokens)),
        "speed": np.array([1.0], dtype=np.float32),
    }
    model_s, (audio, a, f, e) = timed(lambda: whole_model.run(None, feeds), repeats)
    frames = a.shape[2]

    def run(n: int) -> np.ndarray:
        return decode.run(
            None, {asr: a[:, :, :n], f0: f[:, : 2 * n], energy: e[:, : 2 * n],
                   "style": feeds["style"]},
        )[0].ravel()  # fmt: skip

    decoder_s, whole = timed(lambda: run(frames), repeats)
    assert np.array_equal(whole, audio.ravel())  # the cut graph is the model's decoder
    rows = []
    for window in windows:
        seconds, part = timed(lambda w=window: run(min(w + context, frames)), repeats)
        lead, end = 15 * 600, window * 600  # past the leading pad's silence
        ours, theirs = whole[lead:end], part[lead:end]
        rows.append({"frames": window, "audio_s": end / 24_000, "ms": seconds * 1000,
                     "of_decoder": seconds / decoder_s,
                     "magnitude_snr_db": _snr(_magnitude(ours), _magnitude(theirs)),
                     "level": float(np.std(theirs) / np.std(ours))})  # fmt: skip
    return {"frames": frames, "audio_s": len(whole) / 24_000, "model_ms": model_s * 1000,
            "decoder_ms": decoder_s * 1000, "context": context, "windows": rows}  # fmt: skip


def _magnitude(x: np.ndarray) -> np.ndarray:
    frames = np.lib.stride_tricks.sliding_window_view(x, 1024)[::256] * np.hanning(1024)
    return np.abs(np.fft.rfft(frames, axis=1))


def _snr(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(np.sum((reference - other) ** 2))
    return 10 * np.log10(float(np.sum(reference**2)) / max(noise, 1e-20))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", default="12,30,60,120,250", help="characters, engines alone")
    parser.add_argument("--rates", type=rate_list, default=[20.0], help="tokens/s, service")
    parser.add_argument("--replies", type=int, default=len(REPLIES), help="service: how many")
    parser.add_argument("--windows", default="40,80", help="decoder: first-window frames")
    parser.add_argument("--context", type=int, default=20, help="decoder: right context frames")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw numbers here")
    args = parser.parse_args(argv)
    lengths = [int(v) for v in args.lengths.split(",")]
    samples = texts(lengths)
    results: dict[str, Any] = {"version": source_version(), "engines": {}, "service": {}}

    print(f"voicews {results['version']}; figures are medians of {args.repeats} runs")
    print("\n1. engines alone: ms to synthesize a text (the listener waits this for its audio)")
    print(f"{'chars':>6}" + "".join(f"{n + ' ms':>12}{n + ' RTF':>12}" for n in ENGINES))
    costs = {name: engine_costs(name, samples, args.repeats) for name in ENGINES}
    for i, text in enumerate(samples):
        cells = "".join(f"{costs[n][i]['ms']:>12.0f}{costs[n][i]['rtf']:>12.2f}" for n in ENGINES)
        print(f"{len(text):>6}{cells}")
    for name in ENGINES:
        fixed, per_char = fit(costs[name])
        results["engines"][name] = {"rows": costs[name], "fixed_ms": fixed,
                                    "ms_per_char": per_char}  # fmt: skip
        print(f"{name}: {fixed:.0f} ms + {per_char:.1f} ms per character")

    print(f"\n2. the service, {args.replies} replies x {args.repeats} at {args.rates} tokens/s")
    header = ("engine", "rate", "TTFA med", "TTFA p95", "stall med", "stall max", "stalled",
              "RTF med", "CPU ms/audio s", "1st seg words")  # fmt: skip
    print("".join(f"{h:>15}" for h in header))
    for name in ENGINES:
        by_rate = asyncio.run(service(name, args.rates, args.replies, args.repeats))
        results["service"][name] = by_rate
        for rate, got in by_rate.items():
            s: Summary = got["summary"]
            words = statistics.median(len(t.split()) for t in got["first_segments"])
            cells = (name, rate, f"{s.ttfa_med_ms:.0f}", f"{s.ttfa_p95_ms:.0f}",
                     f"{s.stall_med_ms:.0f}", f"{s.stall_max_ms:.0f}",
                     f"{s.stalled_runs}/{s.runs}", f"{s.rtf_med:.2f}",
                     f"{got['cpu_ms_per_audio_s']:.0f}", f"{words:g}")  # fmt: skip
            print("".join(f"{c:>15}" for c in cells))
            got["summary"] = asdict(s)

    windows = [int(v) for v in args.windows.split(",")]
    found = decoder_windows(windows, args.context, args.repeats)
    results["decoder_windows"] = found
    print(f"\n3. kokoro's decoder in windows: {found['frames']} frames "
          f"({found['audio_s']:.2f} s), whole model {found['model_ms']:.0f} ms, decoder "
          f"{found['decoder_ms']:.0f} ms; {args.context} frames of context")  # fmt: skip
    for row in found["windows"]:
        print(f"  first {row['frames']} frames ({row['audio_s']:.2f} s): {row['ms']:.0f} ms, "
              f"{100 * row['of_decoder']:.0f}% of the whole decode; magnitude SNR against it "
              f"{row['magnitude_snr_db']:.1f} dB, level x{row['level']:.2f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(json_safe(results), indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
