"""Kokoro's long pieces decoded in two windows against whole: first audio, then judged in pairs.

    python -m bench kokoro_windows                          # ~5 min on 2 cores
    python -m bench kokoro_windows --rounds 1 --voices af_heart

1. Each held-out sentence (``kokoro_pair.sentences``) given whole to the engine, as an HTTP or
   Wyoming request gives it, both ways in interleaved rounds: time to its first audio and the
   real-time factor (medians), the engine's threads as the server runs them.
2. The sentences the engine decodes in windows (a piece of 3 s or more), in each voice, both
   ways, as the service sends them (``as_heard``): DNSMOS SIG / BAK / OVRL and the level, the
   paired differences (windows less whole) with their standard errors, Whisper WER over the
   sentences without digits, and the level step at the join (100 ms each side) less the whole
   decode's at the same sample.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Sequence

import numpy as np

from bench.engines.kokoro_pair import Tally, sentences
from bench.engines.measures import Judges, as_heard, level_db
from voicews.engines.base import SynthesisOptions
from voicews.engines.kokoro import KokoroEngine
from voicews.engines.kokoro.windows import FADE

WAYS = ("windows", "whole")
STEP = 2400
"""Samples (100 ms at 24 kHz) each side of the join whose levels make its step."""


def pieces(engine: KokoroEngine, text: str, voice: str | None = None) -> Iterator[np.ndarray]:
    for item in engine.synthesize(text, SynthesisOptions(voice=voice)):
        if isinstance(item, np.ndarray):
            yield item


def first_audio(engines: dict[str, KokoroEngine], texts: Sequence[str], rounds: int) -> None:
    firsts: dict[str, list[float]] = {way: [] for way in WAYS}
    rtfs: dict[str, list[float]] = {way: [] for way in WAYS}
    for round_ in range(rounds):
        for way in WAYS if round_ % 2 == 0 else WAYS[::-1]:
            for text in texts:
                start, first, samples = time.perf_counter(), None, 0
                for chunk in pieces(engines[way], text):
                    first = first if first is not None else time.perf_counter() - start
                    samples += len(chunk)
                took = time.perf_counter() - start
                firsts[way].append(first or took)
                rtfs[way].append(took / (samples / engines[way].sample_rate))
    print(f"1. {len(texts)} sentences given whole, {rounds} interleaved rounds (medians)")
    print(f"{'':8s}  {'first audio ms':>14s}  {'p90':>5s}  {'RTF':>5s}")
    for way in WAYS:
        p90 = sorted(firsts[way])[int(0.9 * len(firsts[way]))]
        first_ms, rtf = 1000 * statistics.median(firsts[way]), statistics.median(rtfs[way])
        print(f"{way:8s}  {first_ms:14.0f}  {1000 * p90:5.0f}  {rtf:5.3f}")


def step_db(audio: np.ndarray, at: int) -> float:
    """The level after ``at`` less the level before, :data:`STEP` samples each side."""
    return level_db(audio[at : at + STEP]) - level_db(audio[at - STEP : at])


def judged(engines: dict[str, KokoroEngine], texts: Sequence[str], voices: Sequence[str]) -> None:
    rate = engines["whole"].sample_rate
    tally = Tally(Judges(), rate, WAYS)
    steps = []
    for voice in voices:
        for text in texts:
            windows = list(pieces(engines["windows"], text, voice))
            whole = list(pieces(engines["whole"], text, voice))
            if len(windows) == len(whole):
                continue  # no piece long enough for windows
            join = len(windows[0]) + FADE  # the first piece's, where it was windowed
            audio = {"windows": np.concatenate(windows), "whole": np.concatenate(whole)}
            steps.append(abs(step_db(audio["windows"], join) - step_db(audio["whole"], join)))
            for way, clip in audio.items():
                tally.add(way, as_heard(clip, rate), text)
        print(f"  {voice}: done", file=sys.stderr)
    clips = len(steps)
    print(f"\n2. {clips} clips decoded in windows ({len(texts)} sentences in {', '.join(voices)})")
    tally.report("windows", "whole")
    p90 = sorted(steps)[int(0.9 * len(steps))]
    print(f"level step at the join, less the whole decode's: median {statistics.median(steps):.1f}"
          f" dB, p90 {p90:.1f}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="part 1, interleaved")
    parser.add_argument("--voices", default="af_heart,bm_george", help="part 2")
    args = parser.parse_args(argv)
    engines = {"windows": KokoroEngine(), "whole": KokoroEngine(windowed=False)}
    for engine in engines.values():
        list(pieces(engine, "Hello there."))
    texts = sentences()
    first_audio(engines, texts, args.rounds)
    judged(engines, texts, args.voices.split(","))


if __name__ == "__main__":
    main()
