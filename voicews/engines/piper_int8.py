"""Piper's decoder with its first two stages in int8, and its front's flow in int8, each made
once from the voice's float graph.

The decoder (a HiFi-GAN) is most of a synthesis's compute, and most of that is the convolutions
of its residual blocks. Those of the 128- and 64-channel stages are quantized statically: int8
weights per output channel, uint8 activations over ranges calibrated on the voice's own latents
for :data:`CALIBRATION` (noise off, so the same every time). On one thread a synthesis is then
20-23% cheaper per second of audio, with the same Whisper WER and DNSMOS OVRL 0.02 below the
float decoder's over 20 held-out sentences. The 32-channel stage, and the first and last
convolutions, stay in float: quantized, their noise floor cost OVRL 0.2-0.5 (``python -m bench
piper_int8``).

The front (phoneme ids to latent frames) was then about 40% of a synthesis, half of it the
flow: its convolutions in int8 too cut the front by 40% with the same Whisper WER and DNSMOS
(``python -m bench piper_int8 --front``); the text encoder and the duration predictor stay in
float (:data:`FRONT_QUANTIZED`). ``VOICEWS_PIPER_FLOAT=1`` keeps the decoder and the front in
float.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..cache import cache_dir, file_key

FORMAT_VERSION = 3
"""Bump when the quantization changes, so a stale graph is made again (2: the decoder's ranges
are measured on the latents of the int8 front, which it decodes; 3: the front's flow alone)."""

FLOAT_ENV = "VOICEWS_PIPER_FLOAT"

PIECE = 48
"""Latent frames (0.56 s) in each calibration input: a range is the mean of the pieces' extremes,
so the rare peaks clip and the quiet keeps its resolution. Over whole sentences instead: a
noise floor in the quiet (DNSMOS OVRL 3.26 against 3.28; 24 frames: 3.29 but the waveform's SNR
19 against 22 dB)."""

QUANTIZED = re.compile(r"^/dec/resblocks\.[0-5]/")
"""The convolutions quantized: the residual blocks of the first two stages."""
FRONT_QUANTIZED = re.compile(r"^/flow/")
"""The front's convolutions quantized: the flow's. The text encoder's too took the front from
60 to 43 ms on a long sentence, but its inferences then left regions of onnxruntime's shared
arena in use (32-96 MiB after a long input); without the arena that front saved 3-7% of a
synthesis and nothing on a short one (``docs/engines.md``)."""

CALIBRATION = (
    "Good morning, how can I help you today?",
    "Your order has shipped and should arrive on Thursday.",
    "I am sorry, but that item is out of stock right now.",
    "Would you like me to read the latest headlines?",
    "The meeting starts at noon in the large conference room.",
    "Please say your account number, one digit at a time.",
    "Wow! That is fantastic news, congratulations!",
    "Hmm, I am not sure. Let me look into it.",
    "The train to the airport leaves every twenty minutes.",
    "Is there anything else I can do for you?",
    "She sells seashells by the seashore, quietly and quickly.",
    "Yes. No. Maybe later, thank you.",
    "The temperature will drop sharply overnight, with strong winds from the north.",
    "To reset your password, open settings and choose security.",
    "Call me back whenever it suits you.",
    "Unfortunately, the road is closed because of construction work.",
)
"""Sentences whose latents calibrate the activation ranges: statements, questions,
exclamations, one-word replies."""


def float_wanted() -> bool:
    """Whether ``$VOICEWS_PIPER_FLOAT`` asks for the float decoder (any value but ``0``)."""
    return os.environ.get(FLOAT_ENV, "0") not in ("", "0")


def int8_decoder(decoder: Path, latents: Callable[[str], Sequence[np.ndarray]]) -> Path:
    """``decoder`` quantized, made once into the cache (6 s on one busy core): ``latents``
    gives a text's latent frames (batch, channels, frames), one array per inference."""
    return _made_once(decoder, lambda out: quantize(decoder, calibration(latents), out))


def int8_front(front: Path, feeds: Callable[[str], Sequence[dict[str, np.ndarray]]]) -> Path:
    """``front`` (phoneme ids to latents) with :data:`FRONT_QUANTIZED` in int8, made once into
    the cache: ``feeds`` gives a text's inputs to it, one per inference."""

    def make(out: Path) -> None:
        quantize_front(front, [f for text in CALIBRATION for f in feeds(text)], out)

    return _made_once(front, make)


def _made_once(model: Path, make: Callable[[Path], None]) -> Path:
    """The int8 graph of ``model`` in the cache, written by ``make`` there the first time."""
    out = cache_dir() / "piper-int8" / f"{model.stem}-{file_key(model)}-v{FORMAT_VERSION}.onnx"
    if out.is_file():
        return out
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        make(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def calibration(latents: Callable[[str], Sequence[np.ndarray]]) -> list[np.ndarray]:
    """The inputs the ranges are measured on: :data:`CALIBRATION`'s latents end to end, cut in
    pieces of :data:`PIECE` frames."""
    whole = np.concatenate([frames for text in CALIBRATION for frames in latents(text)], axis=2)
    return [whole[:, :, i : i + PIECE] for i in range(0, whole.shape[2] - PIECE + 1, PIECE)]


def quantize(decoder: Path, inputs: list[np.ndarray], out: Path) -> None:
    """Write ``decoder`` with the :data:`QUANTIZED` convolutions in int8 to ``out``, its
    activation ranges measured on ``inputs``."""
    import onnx

    graph = onnx.load(str(decoder)).graph
    name = graph.input[0].name
    _quantize(decoder, [{name: frames} for frames in inputs], QUANTIZED, out)


def quantize_front(front: Path, inputs: list[dict[str, np.ndarray]], out: Path) -> None:
    """Write ``front`` with the :data:`FRONT_QUANTIZED` convolutions in int8 to ``out``, its
    activation ranges measured on ``inputs`` with the voice's noise on, drawn from fixed seeds
    (the same ranges every time); the graph written draws its noise unseeded, as the voice's."""
    import onnx

    model = onnx.load(str(front))
    noises = [n for n in model.graph.node if n.op_type.startswith("RandomNormal")]
    for number, node in enumerate(noises):
        node.attribute.append(onnx.helper.make_attribute("seed", float(number)))
    seeded = out.with_name(f"{out.name}.seeded")
    try:
        onnx.save(model, str(seeded))
        _quantize(seeded, inputs, FRONT_QUANTIZED, out)
    finally:
        seeded.unlink(missing_ok=True)
    written = onnx.load(str(out))
    for node in written.graph.node:
        if node.op_type.startswith("RandomNormal"):
            kept = [a for a in node.attribute if a.name != "seed"]
            del node.attribute[:]
            node.attribute.extend(kept)
    onnx.save(written, str(out))


def _quantize(
    model: Path, inputs: list[dict[str, np.ndarray]], names: re.Pattern[str], out: Path
) -> None:
    """``model`` with its convolutions whose names match ``names`` quantized statically: int8
    weights per output channel, uint8 activations over the ranges met on ``inputs`` (each
    input's extremes, averaged)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    graph = onnx.load(str(model)).graph
    convolutions = [n.name for n in graph.node if n.op_type == "Conv" and names.match(n.name)]
    feeds = iter(inputs)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(feeds, None)

    # onnxruntime advises pre-processing the model (the bench measured no difference) in two
    # warnings to the root logger, which a first start printed.
    advice = _Advice()
    logging.getLogger().addFilter(advice)
    try:
        quantize_static(
            str(model), str(out), Reader(),
            quant_format=QuantFormat.QOperator, per_channel=True,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            op_types_to_quantize=["Conv"], nodes_to_quantize=convolutions,
            calibrate_method=CalibrationMethod.MinMax, extra_options={"CalibMovingAverage": True},
        )  # fmt: skip
    finally:
        logging.getLogger().removeFilter(advice)


class _Advice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider")
