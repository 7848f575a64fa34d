"""What a Kokoro inference costs against its length, beside Piper's, in one run: the cost
curve the planner's prior and the first segment's length come from.

    python -m bench kokoro_cost                 # ~2 min on 2 busy cores
    python -m bench kokoro_cost --repeats 3 --words 1,2,4,8

Prefixes of held-out replies of 1, 2, 3, ... words, each synthesized whole by each engine in
this process, the engines and lengths interleaved, ``--repeats`` times: median milliseconds
per text, with its phoneme tokens (Kokoro's) and the seconds of audio it gave (edge silence
trimmed). Then the fits ``ms = fixed + per token`` and ``ms = fixed + per character`` (the
planner counts characters), the audio per character ``r``, and what they warrant for a first
segment: ``c`` characters give ``r * c`` seconds of audio and the next segment costs at least
``fixed``, so the first must hold ``fixed / (r - per character)`` characters or the listener
runs dry before the second. Also the parts of a Kokoro call a cache could spare: espeak-ng's
phonemes and the style vector's lookup.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.common import source_version
from bench.engines.kokoro_ab import EVAL
from bench.engines.measures import heard_seconds
from voicews.engines import engine_factory
from voicews.engines.base import SynthesisOptions

ENGINES = ("piper", "kokoro")


def prefixes(words: Sequence[int]) -> list[str]:
    """For each word count, the prefix of that many words of every held-out sentence."""
    return [" ".join(s.split()[:n]) for n in words for s in EVAL if len(s.split()) >= n]


def audio_seconds(engine: Any, text: str) -> float:
    """Seconds of ``text`` as heard (:func:`.measures.heard_seconds`)."""
    chunks = engine.synthesize(text, SynthesisOptions())
    audio = np.concatenate([c for c in chunks if isinstance(c, np.ndarray)])
    return heard_seconds(audio, engine.sample_rate)


def fit(x: Sequence[float], ms: Sequence[float]) -> tuple[float, float]:
    slope, fixed = np.polyfit(np.asarray(x, dtype=float), np.asarray(ms, dtype=float), 1)
    return float(fixed), float(slope)


def kokoro_parts(texts: Sequence[str], repeats: int) -> tuple[float, float]:
    """Median ms of espeak-ng's phonemes for a text, and of a style vector's lookup."""
    from voicews.engines.kokoro.assets import load_voice, style
    from voicews.engines.kokoro.phonemes import inference_budget, phonemize, tokenize

    pack = load_voice("af_heart")
    phonemes, lookups = [], []
    for _ in range(repeats):
        for text in texts:
            start = time.perf_counter()
            pieces = list(phonemize(text, "en-us", inference_budget(1.0)))
            phonemes.append(1000 * (time.perf_counter() - start))
            start = time.perf_counter()
            style(pack, len(tokenize(pieces[0])))
            lookups.append(1000 * (time.perf_counter() - start))
    return statistics.median(phonemes), statistics.median(lookups)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--words", default="1,2,3,4,6,9", help="prefix lengths, in words")
    args = parser.parse_args(argv)
    from voicews.engines.kokoro.phonemes import phonemize, tokenize

    texts = prefixes([int(n) for n in args.words.split(",")])
    tokens = {t: sum(len(tokenize(p)) for p in phonemize(t, "en-us", 100)) for t in texts}
    engines = {name: engine_factory(name)() for name in ENGINES}
    for engine in engines.values():
        audio_seconds(engine, "Warming up, one moment.")
    times: dict[tuple[str, str], list[float]] = {}
    audio: dict[tuple[str, str], float] = {}
    for repeat in range(args.repeats):
        order = list(engines) if repeat % 2 == 0 else list(engines)[::-1]
        for text in texts:
            for name in order:
                start = time.perf_counter()
                audio[name, text] = audio_seconds(engines[name], text)
                times.setdefault((name, text), []).append(1000 * (time.perf_counter() - start))
    print(f"voicews {source_version()}; medians of {args.repeats} interleaved runs")
    print(f"{'words':>5} {'chars':>5} {'tokens':>6}" + "".join(f" {n + ' ms':>10}" for n in ENGINES)
          + "".join(f" {n + ' audio s':>14}" for n in ENGINES))  # fmt: skip
    for text in texts:
        row = f"{len(text.split()):>5} {len(text):>5} {tokens[text]:>6}"
        row += "".join(f" {statistics.median(times[n, text]):>10.0f}" for n in ENGINES)
        row += "".join(f" {audio[n, text]:>14.2f}" for n in ENGINES)
        print(row)
    print()
    for name in ENGINES:
        ms = [statistics.median(times[name, t]) for t in texts]
        fixed_t, per_token = fit([tokens[t] for t in texts], ms)
        fixed_c, per_char = fit([len(t) for t in texts], ms)
        r = sum(audio[name, t] for t in texts) / sum(len(t) for t in texts)
        gain = r - per_char / 1000
        least = fixed_c / 1000 / gain if gain > 0 else float("inf")
        print(f"{name}: {fixed_t:.0f} ms + {per_token:.1f} ms/token; {fixed_c:.0f} ms + "
              f"{per_char:.1f} ms/char; audio {1000 * r:.0f} ms/char; a first segment gains on "
              f"the listener from {least:.1f} chars")  # fmt: skip
    phonemes_ms, style_ms = kokoro_parts(texts, args.repeats)
    print(f"kokoro, per call: espeak-ng phonemes {phonemes_ms:.2f} ms, style vector lookup "
          f"{style_ms:.4f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
