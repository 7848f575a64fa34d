"""How the lanes' onnxruntime sessions should be made: Piper inferences and resident memory.

Each arrangement runs in a fresh process (so its resident memory is its own), in turn, repeated:
- ``one``: one session whose inferences may use every core, shared by the lanes (the lanes as
  they were before ``LaneSessions``);
- ``separate``: a single-threaded session per lane, each with its own weights and arena;
- ``lanes``: ``voicews.engines.ort.LaneSessions``: a wide session for an inference alone and a
  single-threaded one per inference side by side, sharing one copy of the weights and one arena.

It prints, per arrangement (medians over the repeats): a first segment's inference alone
(``Sure, I can help with that.``), two lanes each inferring every sentence of the bench replies
side by side (wall time, audio seconds per second, CPU ms per audio second), and resident memory
after loading and after the inferences, with the lone inference's median ratio to ``one``.

    python -m bench ort_sessions                   # 5 repeats
    python -m bench ort_sessions --repeats 1 --lone 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import REPLIES, source_version
from bench.harness.summaries import fmt, median, ratio, render

ARRANGEMENTS = ("one", "separate", "lanes")
FIRST = "Sure, I can help with that."
ROOT = Path(__file__).resolve().parents[2]
"""Where ``python -m bench`` runs, so each arrangement's process finds the package."""


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def sessions(arrangement: str, model: Path, lanes: int) -> Any:
    """An object with ``run(output_names, feeds)`` for the arrangement."""
    import onnxruntime

    from voicews.engines.ort import LaneSessions

    def plain(threads: int) -> onnxruntime.InferenceSession:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return onnxruntime.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )

    if arrangement == "one":
        return plain(len(os.sched_getaffinity(0)))
    if arrangement == "separate":
        pool = [plain(1) for _ in range(lanes)]
        lock = threading.Lock()

        class Separate:
            def run(self, names: Any, feeds: Any) -> Any:
                with lock:
                    session = pool.pop()
                try:
                    return session.run(names, feeds)
                finally:
                    with lock:
                        pool.append(session)

        return Separate()
    return LaneSessions(model, narrow=lanes)


def child(arrangement: str, lanes: int, lone: int) -> dict[str, float]:
    """One arrangement, in this process."""
    from piper import PiperVoice
    from piper.config import PiperConfig

    from voicews.engines.piper import bundled_voice, with_durations
    from voicews.engines.piper_words import phonemize

    base = rss_mb()
    model = bundled_voice()
    config = PiperConfig.from_dict(
        json.loads(model.with_name(model.name + ".json").read_text(encoding="utf-8"))
    )
    voice = PiperVoice(session=sessions(arrangement, with_durations(model), lanes), config=config)
    loaded = rss_mb()
    ids = [voice.phonemes_to_ids(p) for r in REPLIES for p in phonemize(voice, r)]
    first = voice.phonemes_to_ids(phonemize(voice, FIRST)[0])
    voice.phoneme_ids_to_audio(first)  # warm
    times = []
    for _ in range(lone):
        start = time.perf_counter()
        voice.phoneme_ids_to_audio(first)
        times.append(time.perf_counter() - start)
    audio = [0.0] * lanes

    def lane(i: int) -> None:
        for phonemes in ids:
            audio[i] += voice.phoneme_ids_to_audio(phonemes).size / config.sample_rate

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(lanes)]
    wall, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "lone_ms": 1000 * median(times),
        "pair_wall_s": wall,
        "audio_per_s": sum(audio) / wall,
        "cpu_ms_per_audio_s": 1000 * cpu / sum(audio),
        "rss_loaded_mb": loaded - base,
        "rss_after_mb": rss_mb() - base,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each arrangement [5]")
    parser.add_argument("--lone", type=int, default=15, help="lone inferences per run [15]")
    parser.add_argument("--lanes", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--child", choices=ARRANGEMENTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.lanes, args.lone)))
        return
    runs: dict[str, list[dict[str, float]]] = {a: [] for a in ARRANGEMENTS}
    for repeat in range(args.repeats):
        for arrangement in ARRANGEMENTS:
            done = subprocess.run(
                [sys.executable, "-m", "bench.engines.ort_sessions", "--child", arrangement,
                 "--lanes", str(args.lanes), "--lone", str(args.lone)],
                capture_output=True, text=True, check=True, cwd=ROOT,
            )  # fmt: skip
            runs[arrangement].append(json.loads(done.stdout.splitlines()[-1]))
            print(f"repeat {repeat + 1}, {arrangement}: {runs[arrangement][-1]}", file=sys.stderr)

    def med(arrangement: str, key: str) -> float:
        return median([run[key] for run in runs[arrangement]])

    print(f"voicews {source_version()}, Piper, {args.lanes} lanes, {args.repeats} repeats, medians")
    header = [
        "sessions", "alone (first segment)", "vs one", "side by side", "audio s/s", "vs one",
        "cpu ms/audio s", "RSS loaded", "RSS after",
    ]  # fmt: skip
    rows = [
        [
            a,
            fmt(med(a, "lone_ms"), ".1f", " ms"),
            fmt(ratio(med(a, "lone_ms"), med("one", "lone_ms")), ".2f"),
            fmt(med(a, "pair_wall_s"), ".2f", " s"), fmt(med(a, "audio_per_s"), ".1f"),
            fmt(ratio(med(a, "audio_per_s"), med("one", "audio_per_s")), ".2f"),
            fmt(med(a, "cpu_ms_per_audio_s"), ".0f"),
            fmt(med(a, "rss_loaded_mb"), ".0f", " MB"), fmt(med(a, "rss_after_mb"), ".0f", " MB"),
        ]
        for a in ARRANGEMENTS
    ]  # fmt: skip
    print(render(header, rows))


if __name__ == "__main__":
    main()
