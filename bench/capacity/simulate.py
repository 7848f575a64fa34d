"""The compute worker's planning on a model of a quiet machine, in simulated time.

N conversations go through the real sans-I/O ``Session`` (segmenter, pacing, stitcher, outbox)
as ``capacity.py`` runs them (a burst: all in the same instant, no jitter buffer; staggered:
several turns each, a 100 ms jitter buffer), but the engine is a cost model (``--engine``: Piper
on this voice measured on one idle core, 5 ms + 58 ms per second of audio; or Kokoro, see
``ENGINES``; either speaking about 0.058 s of audio per character plus 0.15 s per sentence) and
time is simulated, so a run is deterministic and a scheduling policy can be compared with
another where the shared machine is too noisy to tell.
Each policy is a way to run the worker's queue:

- ``planned``: voicews' worker (``voicews.compute``): the job due first runs next (``Job.due``:
  fairness per account, a first segment due ``FIRST_AUDIO_TARGET`` after it is asked for; a
  late one yields to a playing listener's cheap segment: ``planning.next_job``),
  one lane per core sharing one session: an inference alone gets all the cores, one beside
  another runs on its lane's thread, ``--shared-factor`` slower (1.15, measured).
- ``strict``: the worker before it: a turn's first segment before any later one, then by
  deadline; one lane, every inference on all the cores.
- ``strict-lanes``: the same order on one single-threaded lane per core (``--lanes 2`` before).

An inference on all the cores takes ``--wide-factor`` of its time on one (0.6, assumed); when
more threads run than there are cores, a job starting then takes proportionally longer.

    python -m bench simulate                        # N = 1..32, all policies, ~1 min
    python -m bench simulate --ns 16 --policies planned,strict --first-target 0.1,0.2,0.3
    python -m bench simulate --engine kokoro --ns 1,2,4 --policies planned
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from bench.common import BURST_REPLIES, CONVERSATION_REPLIES
from bench.harness.connections import Turn
from bench.harness.summaries import (
    BurstSummary,
    LoadSummary,
    fmt,
    int_list,
    largest_clean_n,
    largest_smooth_n,
    render,
)
from voicews.client import word_pieces
from voicews.compute import jobs as planning
from voicews.compute.jobs import Account, Job
from voicews.compute.planning import WAIT_HALF_LIFE, next_job, queued_compute
from voicews.core.config import SessionConfig
from voicews.core.cost import FIRST_WORDS, PRIORS, Cost, CostModel
from voicews.core.events import AudioFrame, Outgoing, TurnDone
from voicews.core.jobs import SynthesisRequest
from voicews.core.pacing import Load, waits
from voicews.core.session import Session

RATE = 22050
SECONDS_PER_CHAR = 0.058
SECONDS_PER_SENTENCE = 0.15
COST_FIXED = 0.005
COST_PER_AUDIO_SECOND = 0.058
"""Piper with its decoder's first stages and its flow in int8, on one idle core: 0.058 s per
second of audio over 20 held-out sentences (``bench piper_int8 --front``); 19-28 ms for two
words, which the 5 ms fixed part overstates a little. The float graphs took 0.071."""
_SENTENCES = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Machine:
    cores: int = 2
    wide_factor: float = 0.6
    shared_factor: float = 1.15


@dataclass(frozen=True)
class EngineModel:
    """The engine's cost on one core, ``fixed`` plus ``per_audio_second`` (Piper's above),
    times ``scale``; the prior the server starts its cost model from; the words of a turn's
    first segment where the server sets them for the engine (``FIRST_WORDS``)."""

    scale: float = 1.0
    prior: Cost = PRIORS["piper"]
    fixed: float = COST_FIXED
    per_audio_second: float = COST_PER_AUDIO_SECOND
    first_words: int | None = None

    def seconds(self, audio_s: float) -> float:
        return self.scale * (self.fixed + self.per_audio_second * audio_s)


ENGINES = {
    "piper": EngineModel(),
    "kokoro": EngineModel(
        prior=PRIORS["kokoro"],
        fixed=0.13,
        per_audio_second=0.15,
        first_words=FIRST_WORDS["kokoro"],
    ),
}
"""``--engine``. Kokoro's static graph as the worker traced it in a burst of four (lean pieces):
a segment beside another on one core took about 0.15 s + 0.17 s per second of its audio ("me
see." 0.29 s, "to Boston leaves at a quarter past six," 0.59 s), and alone on both cores
0.13-0.26 s for 0.4-1.4 s of audio: on one core alone, about 0.13 s + 0.15 s per second. The
model then stalls about a third of a burst of four, where the server stalls about half."""


@dataclass(frozen=True)
class Policy:
    name: str
    lanes: Callable[[Machine], int]
    key: Callable[[Job], tuple[float, ...]] | None
    """The order jobs run in; None: the worker's own (``planning.next_job``)."""
    threads: Callable[[Machine, int], tuple[int, float]]
    """With this many jobs already running, the threads a starting job takes and the factor on
    its time on one core."""
    fair: bool


POLICIES = {
    "planned": Policy(
        "planned",
        lambda m: m.cores,
        None,
        lambda m, running: (m.cores, m.wide_factor) if running == 0 else (1, m.shared_factor),
        fair=True,
    ),
    "strict": Policy(
        "strict",
        lambda m: 1,
        lambda job: (0.0 if job.first else 1.0, job.deadline),
        lambda m, running: (m.cores, m.wide_factor),
        fair=False,
    ),
    "strict-lanes": Policy(
        "strict-lanes",
        lambda m: m.cores,
        lambda job: (0.0 if job.first else 1.0, job.deadline),
        lambda m, running: (1, 1.0),
        fair=False,
    ),
}


@dataclass(eq=False)
class SimJob:
    job: Job
    session: SimSession
    job_id: int
    sentences: list[str]
    seq: int
    chars: int
    started: bool = False
    sounded: bool = False


@dataclass(eq=False)
class SimSession:
    """One conversation: the real session, and what its client received."""

    index: int
    session: Session
    account: Account
    turn: Turn | None = None
    times: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    jobs: dict[int, SimJob] = field(default_factory=dict)
    timer: tuple[float, int] | None = None


class Simulation:
    def __init__(
        self,
        policy: Policy,
        machine: Machine,
        jitter_s: float,
        engine: EngineModel | None = None,
        pacing: Callable[[SessionConfig], object] | None = None,
    ) -> None:
        """``pacing``: makes each session's pacing in place of its own (an A/B)."""
        self.policy, self.machine, self.jitter_s = policy, machine, jitter_s
        self.engine = engine or EngineModel()
        self.costs = CostModel(self.engine.prior)
        """The engine's cost as ``ComputeWorker`` fits it."""
        self.session_config = SessionConfig()
        if self.engine.first_words is not None:
            words = self.engine.first_words
            segmenter = replace(self.session_config.segmenter, first_words=words)
            self.session_config = replace(self.session_config, segmenter=segmenter)
        self.pacing = pacing
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.queue: list[SimJob] = []
        self.lanes = policy.lanes(machine)
        self.free = self.lanes
        self.threads = 0
        self.lane_seconds = 0.0
        self.wait, self.wait_at = 0.0, 0.0
        """The queue wait lately, and when last seen, as ``ComputeWorker.queue_wait`` keeps
        them."""
        self.turns: list[Turn] = []
        self.on_turn_done: Callable[[SimSession, Turn], None] | None = None
        self._cancelled: set[int] = set()

    # --- time -----------------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> int:
        seq = next(self._seq)
        heapq.heappush(self._events, (when, seq, action))
        return seq

    def run(self) -> None:
        while self._events:
            when, seq, action = heapq.heappop(self._events)
            if seq in self._cancelled:
                continue
            self.now = max(self.now, when)
            action()

    # --- the driver ------------------------------------------------------------------------

    def sync(self, conv: SimSession) -> None:
        session = conv.session
        while (item := session.outbox.pop()) is not None:  # sent at once; may free room
            session.sent(item, self.now)
            self.receive(conv, item)
        for request in session.take_submissions():
            assert isinstance(request, SynthesisRequest)
            job = Job(
                lambda _engine: iter(()),
                request.deadline,
                lambda _event: None,
                first=request.first,
                account=conv.account if self.policy.fair else None,
                chars=len(request.text),
            )
            job._submitted = self.now
            sentences = [s for s in _SENTENCES.split(request.text) if s.strip()]
            sim = SimJob(job, conv, request.job_id, sentences, next(self._seq), len(request.text))
            conv.jobs[request.job_id] = sim
            if conv.turn is not None:
                conv.turn.segments.append(request.text)
            self.queue.append(sim)
        for job_id in session.take_cancellations():
            if (cancelled := conv.jobs.pop(job_id, None)) is not None:
                cancelled.job.cancelled = True
        if conv.timer is not None:
            self._cancelled.add(conv.timer[1])
            conv.timer = None
        wake = session.wakeup_at(self.now)
        if wake is not None and wake < self.now + 60:
            conv.timer = (wake, self.at(wake, lambda: self.tick(conv)))
        self.dispatch()

    def refresh(self, conv: SimSession) -> None:
        """What ``Driver.refresh`` does: the worker as it is now, told to the session before
        it acts (not after: sessions acting in the same instant then each saw it idle)."""
        conv.session.load(self.load())

    def load(self) -> Load:
        """The worker's figures as ``Planner.load`` tells them to the sessions."""
        cost = self.costs.estimate(self.now)
        queued = [j for j in self.queue if not j.job.cancelled]
        queue = queued_compute((j.job for j in queued), cost, self.lanes, self.now)
        backlog = waits(queue, planning.FIRST_AUDIO_TARGET)
        return Load(self.waited(), cost, not queued and self.free > 0, backlog, queue)

    def tick(self, conv: SimSession) -> None:
        conv.timer = None
        self.refresh(conv)
        conv.session.tick(self.now)
        self.sync(conv)

    def receive(self, conv: SimSession, item: Outgoing) -> None:
        turn = conv.turn
        if turn is None:
            return
        if isinstance(item, AudioFrame):
            conv.times.append(self.now)
            conv.samples.append(item.samples)
        elif isinstance(item, TurnDone):
            turn.done_at = self.now
            turn.finish(conv.times, conv.samples, self.jitter_s)
            self.turns.append(turn)
            conv.turn = None
            if self.on_turn_done is not None:
                self.on_turn_done(conv, turn)

    def speak(self, conv: SimSession, turn: Turn, text: str, rate: float) -> None:
        """Start a turn now: reset, then the word pieces at ``rate``, then the end."""
        conv.turn, conv.times, conv.samples = turn, [], []
        turn.sample_rate = RATE
        self.refresh(conv)
        conv.session.turn_reset(f"t{len(self.turns)}-{conv.index}", self.now)
        self.sync(conv)
        pieces = word_pieces(text)
        for i, piece in enumerate(pieces):
            self.at(self.now + i / rate, lambda p=piece: self.delta(conv, p))
        self.at(self.now + (len(pieces) - 1) / rate + 1e-6, lambda: self.end(conv))

    def delta(self, conv: SimSession, piece: str) -> None:
        assert conv.turn is not None
        if conv.turn.first_delta_at is None:
            conv.turn.first_delta_at = self.now
        self.refresh(conv)
        conv.session.text_delta(piece, self.now)
        self.sync(conv)

    def end(self, conv: SimSession) -> None:
        assert conv.turn is not None
        conv.turn.end_text_at = self.now
        self.refresh(conv)
        conv.session.end_text(self.now)
        self.sync(conv)

    # --- the worker ------------------------------------------------------------------------

    def dispatch(self) -> None:
        while self.free:
            self.queue = [j for j in self.queue if not j.job.cancelled]
            if not self.queue:
                return
            sim = self.next(self.queue)
            self.queue.remove(sim)
            threads, factor = self.policy.threads(self.machine, self.lanes - self.free)
            if not sim.started and not sim.job.first:
                wait, lately = self.now - sim.job._submitted, self.waited()
                self.wait = wait if wait > lately else 0.9 * lately + 0.1 * wait
                self.wait_at = self.now
            sim.started = True
            self.free -= 1
            self.step(sim, threads, factor)

    def next(self, queue: list[SimJob]) -> SimJob:
        """The job the policy runs next: ``planned`` as the worker's planner picks it."""
        if self.policy.key is None:
            ordered = sorted(queue, key=lambda j: j.seq)
            job = next_job([j.job for j in ordered], self.costs.estimate(self.now), self.now)
            return next(j for j in ordered if j.job is job)
        key = self.policy.key
        return min(queue, key=lambda j: (*key(j.job), j.seq))

    def waited(self) -> float:
        return self.wait * 0.5 ** ((self.now - self.wait_at) / WAIT_HALF_LIFE)

    def step(self, sim: SimJob, threads: int, factor: float) -> None:
        sentence = sim.sentences.pop(0)
        audio_s = SECONDS_PER_CHAR * len(sentence) + SECONDS_PER_SENTENCE
        seconds = self.engine.seconds(audio_s) * factor
        self.threads += threads
        seconds *= max(1.0, self.threads / self.machine.cores)
        started = self.now

        def done() -> None:
            self.threads -= threads
            self.free += 1
            lane_seconds = (self.now - started) * threads
            self.lane_seconds += lane_seconds
            job, conv = sim.job, sim.session
            if not sim.sounded:
                sim.sounded = True
                self.costs.observe(sim.chars, self.now - started, self.now)
            if not job.cancelled:
                job.gave(self.now, audio_s)
                if job.account is not None:
                    worth = lane_seconds / (self.engine.scale * self.engine.per_audio_second)
                    job.account.charge(self.now, worth)
                audio = np.full(round(audio_s * RATE), 0.1, dtype=np.float32)
                self.refresh(conv)
                conv.session.on_audio(sim.job_id, audio, self.now)
                if sim.sentences:
                    sim.seq = next(self._seq)
                    self.queue.append(sim)
                else:
                    conv.jobs.pop(sim.job_id, None)
                    conv.session.on_done(sim.job_id, self.now)
                self.sync(conv)
            self.dispatch()

        self.at(self.now + seconds, done)

    def conversation(self, index: int) -> SimSession:
        session = Session(f"s{index}", RATE, self.session_config)
        if self.pacing is not None:
            session._shared.pacing = self.pacing(self.session_config)  # type: ignore[assignment]
        session.start(self.now)
        return SimSession(index, session, Account())


# --- scenarios -------------------------------------------------------------------------------


def burst(
    policy: Policy, machine: Machine, n: int, rate: float, engine: EngineModel | None = None
) -> BurstSummary:
    sim = Simulation(policy, machine, 0.0, engine)
    for i in range(n):
        conv = sim.conversation(i)
        reply = i % len(BURST_REPLIES)
        turn = Turn(policy.name, "burst", rate, reply, n=n, conversation=i)
        sim.at(0.0, lambda c=conv, t=turn, r=reply: sim.speak(c, t, BURST_REPLIES[r], rate))
    sim.run()
    return BurstSummary.of(n, sim.turns, sim.lane_seconds, 0.0)


def staggered(
    policy: Policy,
    machine: Machine,
    n: int,
    turns: int,
    rate: float,
    jitter_s: float,
    seed: int,
    engine: EngineModel | None = None,
) -> LoadSummary:
    sim = Simulation(policy, machine, jitter_s, engine)
    converse(sim, policy.name, n, turns, rate, seed)
    wall = max((t.done_at or 0.0) for t in sim.turns)
    return LoadSummary.of(n, sim.turns, sim.lane_seconds, wall, 0.0)


def converse(sim: Simulation, name: str, n: int, turns: int, rate: float, seed: int) -> None:
    """``n`` conversations starting within 1.5 s (one alone at once), ``turns`` replies each,
    the next asked for 0.5-1.5 s after the last was heard; run to the end."""
    rng = random.Random(seed)
    spoken: dict[int, int] = {}

    def next_turn(conv: SimSession) -> None:
        k = spoken.get(conv.index, 0)
        reply = (conv.index + k) % len(CONVERSATION_REPLIES)
        turn = Turn(name, "sweep", rate, reply, repeat=k, n=n, conversation=conv.index)
        spoken[conv.index] = k + 1
        sim.speak(conv, turn, CONVERSATION_REPLIES[reply], rate)

    def done(conv: SimSession, turn: Turn) -> None:
        if spoken[conv.index] < turns and turn.first_delta_at is not None:
            heard = turn.first_delta_at + (turn.playback.end_s or 0.0)
            sim.at(max(sim.now, heard) + rng.uniform(0.5, 1.5), lambda: next_turn(conv))

    sim.on_turn_done = done
    for i in range(n):
        conv = sim.conversation(i)
        sim.at(rng.uniform(0.0, 1.5) if n > 1 else 0.0, lambda c=conv: next_turn(c))
    sim.run()


# --- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--ns", type=int_list, default=[1, 4, 8, 12, 16, 24, 32])
    parser.add_argument("--engine", choices=sorted(ENGINES), default="piper")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--wide-factor", type=float, default=0.6)
    parser.add_argument("--shared-factor", type=float, default=1.15)
    parser.add_argument(
        "--first-target",
        type=lambda s: [float(v) for v in s.split(",")],
        default=[planning.FIRST_AUDIO_TARGET],
        help="FIRST_AUDIO_TARGET values to try with the planned policy",
    )
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    machine = Machine(args.cores, args.wide_factor, args.shared_factor)
    engine = ENGINES[args.engine]
    burst_levels: dict[str, list[BurstSummary]] = {}
    staggered_levels: dict[str, list[LoadSummary]] = {}
    for name in args.policies.split(","):
        targets = args.first_target if name == "planned" else [planning.FIRST_AUDIO_TARGET]
        for target in targets:
            planning.FIRST_AUDIO_TARGET = target
            label = name if len(targets) == 1 else f"{name} {1000 * target:.0f} ms"
            policy = POLICIES[name]
            burst_levels[label] = [burst(policy, machine, n, args.rate, engine) for n in args.ns]
            staggered_levels[label] = [
                staggered(policy, machine, n, args.turns, args.rate, 0.1, args.seed, engine)
                for n in args.ns
            ]
    print(
        f"model: {args.engine}, {args.cores} cores, {1000 * engine.fixed:.0f} ms + "
        f"{1000 * engine.per_audio_second:.0f} ms per audio second on "
        f"one, x{args.wide_factor:g} on all, x{args.shared_factor:g} beside another on a shared "
        f"session; {args.rate:g} tokens/s"
    )
    header = ["N", "policy", "burst fa p95", "max stall", "stalled", "lane ms/audio s",
              "stag. fa p95", "underruns", "conv w/ under", "max stall"]  # fmt: skip
    rows = []
    for i, n in enumerate(args.ns):
        for label in burst_levels:
            b, s = burst_levels[label][i], staggered_levels[label][i]
            rows.append([
                str(n), label, fmt(b.ttfa_p95_ms), fmt(b.max_stall_ms), f"{b.stalled}/{n}",
                fmt(b.cpu_ms_per_audio_s), fmt(s.ttfa_p95_ms), str(s.underruns),
                f"{s.conversations_with_underrun}/{n}", fmt(s.longest_stall_ms),
            ])  # fmt: skip
    print(render(header, rows, left=2))
    for label in burst_levels:
        print(
            f"largest N without a stall: {label}: burst "
            f"{largest_smooth_n(burst_levels[label])}, staggered "
            f"{largest_clean_n(staggered_levels[label])}"
        )


if __name__ == "__main__":
    main()
