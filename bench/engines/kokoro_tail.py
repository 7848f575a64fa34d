"""Kokoro's pieces with the silence after their last sound cropped (``SynthesisOptions.lean``,
as a busy worker asks), against rendered whole.

    python -m bench kokoro_tail              # ~4 min on 2 cores
    python -m bench kokoro_tail --voices af_heart --replies 4   # smoke run

Every held-out reply (``kokoro_ab.EVAL`` and ``bench.common.REPLIES``) is cut into segments of
one to five words (seeded), as a busy segmenter cuts them, and each segment synthesized both
ways in turn (the order alternating), then joined by the service's stitcher with the pause
its ending asks for. Printed per variant: compute per segment and per second heard (median of
the per-reply ratios), the level step at each join (the speech's loudness in the 300 ms before
it against the 300 ms after it), the level of each segment's speech against the same segment
rendered whole, and DNSMOS OVRL and Whisper WER of the joined
replies. The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bench.common import REPLIES
from bench.engines.kokoro_ab import EVAL
from bench.engines.measures import Judges, level_db, speech

WINDOW = 0.3
"""Seconds of speech each side of a join whose loudness is compared."""


def segments(text: str, rng: np.random.Generator) -> list[str]:
    """``text`` cut every one to five words."""
    words, cut, i = text.split(), [], 0
    while i < len(words):
        j = min(len(words), i + int(rng.integers(1, 6)))
        cut.append(" ".join(words[i:j]))
        i = j
    return cut


def boundary_of(segment: str) -> object:
    from voicews.text.segmenter import Boundary

    end = segment.rstrip()[-1:]
    return Boundary.SENTENCE if end in ".!?" else Boundary.CLAUSE if end in ",;:" else Boundary.WORD


def main(argv: Sequence[str] | None = None) -> None:
    from voicews.audio import Stitcher
    from voicews.engines.base import SynthesisOptions
    from voicews.engines.kokoro import KokoroEngine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--voices", default="af_heart,am_michael,bf_emma")
    parser.add_argument("--replies", type=int, default=0, help="the first N replies (0: all)")
    args = parser.parse_args(argv)
    engine = KokoroEngine()
    rate = engine.sample_rate
    window = int(WINDOW * rate)
    replies = list(EVAL) + list(REPLIES)
    replies = replies[: args.replies] if args.replies else replies
    rng = np.random.default_rng(0)
    variants = {"lean": True, "whole": False}
    joined: dict[str, list[tuple[str, npt.NDArray[np.float32]]]] = {n: [] for n in variants}
    per_second: dict[str, list[float]] = {n: [] for n in variants}
    per_segment: dict[str, list[float]] = {n: [] for n in variants}
    steps: dict[str, list[float]] = {n: [] for n in variants}
    shifts: list[float] = []
    for voice in args.voices.split(","):
        list(engine.synthesize("Warming up.", SynthesisOptions(voice=voice)))
        for k, reply in enumerate(replies):
            cut = segments(reply, rng)
            audio: dict[str, list[npt.NDArray[np.float32]]] = {n: [] for n in variants}
            spent = dict.fromkeys(variants, 0.0)
            for i, segment in enumerate(cut):
                order = list(variants) if (i + k) % 2 == 0 else list(variants)[::-1]
                for name in order:
                    options = SynthesisOptions(voice=voice, lean=variants[name])
                    started = time.perf_counter()
                    chunks = engine.synthesize(segment, options)
                    clip = np.concatenate([c for c in chunks if isinstance(c, np.ndarray)])
                    seconds = time.perf_counter() - started
                    spent[name] += seconds
                    per_segment[name].append(seconds)
                    audio[name].append(clip)
                shifts.append(
                    level_db(speech(audio["lean"][-1])) - level_db(speech(audio["whole"][-1]))
                )
            for name, clips in audio.items():
                stitcher, out, starts = Stitcher(rate), [], []
                for segment, clip in zip(cut, clips, strict=True):
                    stitcher.begin_segment()
                    starts.append(sum(map(len, out)))
                    out.append(stitcher.push(clip))
                    out.append(stitcher.end_segment(boundary_of(segment)))  # type: ignore[arg-type]
                out.append(stitcher.finish())
                whole = np.concatenate(out)
                for at in starts[1:]:
                    before, after = speech(whole[max(0, at - window) : at]), speech(whole[at:])
                    if len(before) and len(after):
                        steps[name].append(
                            abs(level_db(before[-window:]) - level_db(after[:window]))
                        )
                heard = len(speech(whole)) / rate
                per_second[name].append(spent[name] / heard)
                joined[name].append((reply, whole))
    judges = Judges()
    print(f"{len(shifts)} segments, {len(joined['lean'])} replies ({args.voices})")
    print(f"{'':8} {'ms/segment':>10} {'compute/s heard':>16} {'join step dB p50/p90':>21} "
          f"{'DNSMOS OVRL':>11} {'WER':>6}")  # fmt: skip
    for name in variants:
        errors = total = 0
        mos = []
        for reply, whole in joined[name]:
            e, n, _ = judges.wer(whole, rate, reply)
            errors, total = errors + e, total + n
            mos.append(judges.mos(whole, rate)[2])
        p50, p90 = np.percentile(steps[name], [50, 90])
        print(f"{name:8} {1000 * statistics.median(per_segment[name]):10.0f} "
              f"{statistics.median(per_second[name]):16.3f} {p50:12.2f} / {p90:5.2f} "
              f"{statistics.mean(mos):11.3f} {errors / total:6.3f}")  # fmt: skip
    largest = max(shifts, key=abs)
    print(f"lean segment's speech against whole: level {statistics.mean(shifts):+.2f} dB "
          f"mean, {statistics.pstdev(shifts):.2f} sd, largest {largest:+.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
