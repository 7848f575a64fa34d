"""Kokoro's segments cut mid-sentence: said alone, and said with the next word and cut off where
it starts (``SynthesisOptions.then``), each end against the same words inside the whole sentence.

    python -m bench kokoro_endings              # ~1 min on 2 cores
    python -m bench kokoro_endings --voice bf_emma

Every held-out sentence of five words or more (``bench.common.LISTENING_REPLIES``,
``kokoro_ab.EVAL``) is synthesized whole, then cut every two to four words (seeded; never after
a sentence's end), and the three words before each cut synthesized both ways. Printed per way:
the pitch over the last 300 ms of the segment's sound (``bench.listening.pitch``: ends falling as
a statement does; the end's level against the whole sentence's median F0; how far that level is
from the same words' end inside the whole sentence, median), the speech's loudness against said
alone, and the compute per segment. The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bench.common import LISTENING_REPLIES
from bench.engines.kokoro_ab import EVAL
from bench.engines.kokoro_tail import db
from bench.engines.measures import speech
from bench.listening.pitch import Contour, end_contour, falls, key_st

WAYS = ("alone", "next word")


def cuts(words: Sequence[str], rng: np.random.Generator) -> list[int]:
    """Where ``words`` are cut: every two to four words, never at the last or after a
    sentence's end."""
    at, out = 0, []
    while (at := at + int(rng.integers(2, 5))) < len(words) - 1:
        if words[at - 1][-1] not in ".!?":
            out.append(at)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from voicews.engines.base import SynthesisOptions, WordStarts
    from voicews.engines.kokoro import KokoroEngine

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--voice", default="af_heart")
    args = parser.parse_args(argv)
    engine = KokoroEngine(args.voice)
    rate = engine.sample_rate

    def said(text: str, then: str = "") -> tuple[npt.NDArray[np.float32], tuple[int, ...], float]:
        started = time.perf_counter()
        out = list(engine.synthesize(text, SynthesisOptions(then=then)))
        seconds = time.perf_counter() - started
        words = next(x.samples for x in out if isinstance(x, WordStarts))
        audio = np.concatenate([x for x in out if isinstance(x, np.ndarray)])
        return audio, words, seconds

    said("Warming up.")
    rng = np.random.default_rng(1)
    ends: dict[str, list[tuple[Contour, Contour, float]]] = {way: [] for way in WAYS}
    loudness: list[float] = []
    spent: dict[str, list[float]] = {way: [] for way in WAYS}
    sentences = [s for reply in LISTENING_REPLIES for s in reply] + list(EVAL)
    for sentence in sentences:
        words = sentence.split()
        if len(words) < 5:
            continue
        whole, marks, _ = said(sentence)
        key = key_st(whole, rate)
        for at in cuts(words, rng):
            text = " ".join(words[max(0, at - 3) : at])
            alone, _, alone_s = said(text)
            ahead, _, ahead_s = said(text, words[at])
            spent["alone"].append(alone_s)
            spent["next word"].append(ahead_s)
            loudness.append(db(speech(ahead)) - db(speech(alone)))
            inside = end_contour(whole, int(marks[at]), rate)
            measured = {
                way: end_contour(a, len(a), rate)
                for way, a in zip(WAYS, (alone, ahead), strict=True)
            }
            if inside is None or None in measured.values():
                continue
            for way, contour in measured.items():
                assert contour is not None
                ends[way].append((contour, inside, key))
    count = len(ends["alone"])
    print(f"{count} mid-sentence ends measured of {len(loudness)} ({args.voice})")
    print(f"{'':10} {'falling':>8} {'level st':>9} {'off whole st':>13} {'ms/segment':>11}")
    whole_ends = ends["alone"]
    print(
        f"{'whole':10} {sum(falls(w, k) for _, w, k in whole_ends):8d} "
        f"{statistics.median(w.end_st - k for _, w, k in whole_ends):+9.2f} {'':>13} {'':>11}"
    )
    for way in WAYS:
        print(
            f"{way:10} {sum(falls(c, k) for c, _, k in ends[way]):8d} "
            f"{statistics.median(c.end_st - k for c, _, k in ends[way]):+9.2f} "
            f"{statistics.median(abs(c.end_st - w.end_st) for c, w, _ in ends[way]):13.2f} "
            f"{1000 * statistics.median(spent[way]):11.0f}"
        )
    p10, p50, p90 = np.percentile(loudness, [10, 50, 90])
    print(f"said with the next word against alone: loudness {p50:+.2f} dB (p10 {p10:+.2f}, "
          f"p90 {p90:+.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
