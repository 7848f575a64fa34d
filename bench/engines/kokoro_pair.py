"""Two Kokoro graphs, the same sentences in every voice, judged in pairs.

    python -m bench kokoro_pair --before PATH [--after PATH]     # ~8 min on 2 cores

A change to the graph that is only float rounding still renders the speech differently (the
static graph's int8 activations and the harmonic source's phases turn a last bit into another
rendering): whether it is a worse one shows only over many clips, judged in pairs. Each held-out
sentence (``kokoro_ab.EVAL`` and the sentences of ``bench.common.REPLIES``) in each shipped
voice, rendered whole by both graphs (``--after``: the engine's own graph by default); for each
graph, DNSMOS SIG / BAK / OVRL (``speechmos``' ``sig_bak_ovr.onnx``), Whisper WER over the
sentences without digits (Whisper writes "4" for "four"), and the level (RMS over the heard
part); then the paired differences (after less before) with their standard errors, and how far
apart the renderings are (SNR of one against the other). Graphs are deterministic: one rendering
each; no timing here (``kokoro_ab`` times graphs).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.common import REPLIES
from bench.engines.kokoro_ab import EVAL
from bench.engines.measures import Judges, as_heard, level_db, snr_db
from voicews.engines.base import SynthesisOptions
from voicews.engines.kokoro import KokoroEngine
from voicews.engines.kokoro.assets import voices


def sentences() -> list[str]:
    """The held-out sentences: ``EVAL`` and the replies' own."""
    split = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
    return [*EVAL, *(s for reply in REPLIES for s in split.split(reply))]


def render(engine: KokoroEngine, text: str, voice: str) -> np.ndarray:
    """``text`` whole in ``voice``, as the service sends it (``as_heard``)."""
    chunks = engine.synthesize(text, SynthesisOptions(voice=voice))
    audio = np.concatenate([c for c in chunks if isinstance(c, np.ndarray)])
    return as_heard(audio, engine.sample_rate)


def paired(differences: list[float]) -> str:
    mean = statistics.fmean(differences)
    se = statistics.stdev(differences) / math.sqrt(len(differences)) if len(differences) > 1 else 0
    return f"{mean:+.3f} (se {se:.3f})"


class Tally:
    """DNSMOS SIG / BAK / OVRL, the level and Whisper's errors (over texts without digits: it
    writes "4" for "four") of each rendering, clip by clip, and their table in pairs."""

    def __init__(self, judges: Judges, rate: int, names: Sequence[str]) -> None:
        self.judges, self.rate = judges, rate
        self.scores: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
        self.levels: dict[str, list[float]] = {name: [] for name in names}
        self.errors = {name: [0, 0] for name in names}

    def add(self, name: str, clip: np.ndarray, text: str) -> None:
        self.scores[name].append(self.judges.mos(clip, self.rate))
        self.levels[name].append(level_db(clip))
        if not re.search(r"\d", text):
            wrong, total, _ = self.judges.wer(clip, self.rate, text)
            self.errors[name][0] += wrong
            self.errors[name][1] += total

    def report(self, after: str, before: str) -> None:
        """The table, then ``after`` less ``before`` clip by clip, with standard errors."""
        print(f"{'':8s}  {'SIG':>5s}  {'BAK':>5s}  {'OVRL':>5s}  {'WER':>5s}  {'level dB':>8s}")
        for name, scores in self.scores.items():
            sig, bak, ovrl = (statistics.fmean(s[i] for s in scores) for i in range(3))
            wer = self.errors[name][0] / max(self.errors[name][1], 1)
            level = statistics.fmean(self.levels[name])
            print(f"{name:8s}  {sig:5.3f}  {bak:5.3f}  {ovrl:5.3f}  {wer:5.3f}  {level:8.2f}")
        ours, theirs = self.scores[after], self.scores[before]
        for i, part in enumerate(("SIG", "BAK", "OVRL")):
            diff = [a[i] - b[i] for a, b in zip(ours, theirs, strict=True)]
            print(f"{after} - {before}, {part}: {paired(diff)}")
        levels = zip(self.levels[after], self.levels[before], strict=True)
        print(f"{after} - {before}, level dB: {paired([a - b for a, b in levels])}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="an .onnx with Kokoro's inputs")
    parser.add_argument("--after", type=Path, help="another (default: the engine's own graph)")
    parser.add_argument("--voices", default=",".join(voices()))
    args = parser.parse_args(argv)
    engines = {"before": KokoroEngine(graph=args.before), "after": KokoroEngine(graph=args.after)}
    texts = sentences()
    tally = Tally(Judges(), engines["before"].sample_rate, list(engines))
    apart = []
    for voice in args.voices.split(","):
        for text in texts:
            audio = {name: render(engine, text, voice) for name, engine in engines.items()}
            for name, clip in audio.items():
                tally.add(name, clip, text)
            apart.append(snr_db(audio["after"], audio["before"]))
        print(f"  {voice}: done", file=sys.stderr)
    print(f"{len(apart)} clips: {len(texts)} held-out sentences in {args.voices}")
    tally.report("after", "before")
    print(f"SNR of one rendering against the other: median {statistics.median(apart):.1f} dB")


if __name__ == "__main__":
    main()
