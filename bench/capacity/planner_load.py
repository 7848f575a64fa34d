"""What reading the compute worker's load costs the event loop, as conversations grow.

Every session reads ``ComputeWorker.load`` after each event and frame it handles (33 readings a
second of audio per conversation, counted through a real server: a burst of four at 20 tokens
a second), and a reading sorts the queue. This builds the planner's queue with a segment per
conversation (as in a burst), reads it at that rate for N conversations, with a change of the
queue (a segment submitted or stepped) every ``--reads-per-change`` readings, and prints per
N: the microseconds a fresh reading takes, and the share of the event loop's core the readings
take with a reading kept ``LOAD_FRESH`` (the planner's) against none kept. Medians of
``--repeats`` runs, on this machine's one core.

    python -m bench planner_load                     # N = 16, 64, 256, 1024 (~20 s)
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from voicews.compute import planning
from voicews.compute.jobs import Job
from voicews.compute.planning import Planner

READS_PER_AUDIO_SECOND = 33.0
"""Load readings per second of audio of one conversation (a real server, see above)."""


def planner(conversations: int, rng: random.Random, now: float) -> Planner:
    plan = Planner()
    for _ in range(conversations):
        due = now + rng.uniform(0.0, 2.0)
        job = Job(None, due, lambda _: None, first=rng.random() < 0.2, chars=rng.randint(10, 60))
        plan.add(job, now)
    return plan


def read_seconds(conversations: int, fresh: float, reads_per_change: int, seconds: float) -> float:
    """CPU seconds the readings of ``seconds`` of real time take, ``fresh``: ``LOAD_FRESH``."""
    planning.LOAD_FRESH = fresh
    plan, now = planner(conversations, random.Random(0), 1000.0), 1000.0
    reads = int(READS_PER_AUDIO_SECOND * conversations * seconds)
    step = seconds / reads
    started = time.process_time()
    for i in range(reads):
        if i % reads_per_change == 0:
            plan.changed()
        plan.load(now + i * step)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--reads-per-change", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    kept = planning.LOAD_FRESH
    print(
        f"{'N':>5} {'reading (us)':>13} {'readings/s':>11} "
        f"{'loop share, none kept':>22} {f'kept {kept * 1000:g} ms':>12}"
    )
    for n in args.ns:
        seconds = min(1.0, 64.0 / n)  # of real time, so every N takes about as long
        none = statistics.median(
            read_seconds(n, 0.0, args.reads_per_change, seconds) for _ in range(args.repeats)
        )
        cached = statistics.median(
            read_seconds(n, kept, args.reads_per_change, seconds) for _ in range(args.repeats)
        )
        reads = READS_PER_AUDIO_SECOND * n
        print(
            f"{n:>5} {1e6 * none / (reads * seconds):>13.1f} {reads:>11.0f} "
            f"{none / seconds:>22.3f} {cached / seconds:>12.3f}"
        )
    planning.LOAD_FRESH = kept


if __name__ == "__main__":
    main()
