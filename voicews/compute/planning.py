"""Which job runs next, and what the queue tells the sessions: no threads, no clock.

It plans rather than ranks: every queued job is due at a time (when its listener runs dry;
for a turn's first segment, ``FIRST_AUDIO_TARGET`` after it was asked for) and the job due
first runs next, one step at a time. So a listener about to run dry goes before a first audio
that can wait a little, and a first audio before a listener with seconds in hand; a running
job is resumed step by step, and a job due sooner overtakes it at its next step. A first audio
already late yields, for a little while, to a cheap segment whose listener would otherwise run
dry (:func:`next_job`).

Fairness holds per account (a session, or all one-shot requests together), not per job: each
step's compute is charged to its account, in the seconds of audio it is worth, against a
real-time clock. An account given more than ``ALLOWANCE`` beyond what a real-time listener
could have heard waits as if its listener had that much in hand, and its jobs never take the
last free lane; a session that listens never gets there. A session has at most one synthesis
job queued (and in agent mode one generation besides), so the queue is bounded by the number
of sessions. The compute worker calls every method with its lock held.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ..core.cost import DEFAULT_PRIOR, Cost, CostModel
from ..core.pacing import Load, Queue, waits
from .jobs import ALLOWANCE, FIRST_AUDIO_TARGET, Account, Job

PLAYING_JOB = 0.1
"""Seconds of compute to its first audio under which a segment whose listener is already
hearing the reply may go before a turn's first segment that is already late (:func:`next_job`):
Piper's few words (50-100 ms), not Kokoro's (a third of a second and more, which in four at once
pushed first audio p95 past 900 ms in the model)."""
YIELDS_WITHIN = 0.2
"""Seconds past its due time within which a first segment yields to a playing listener's
(:func:`next_job`); later than that it yields to no one, so the last first audio of a burst
stays within the goal (16 at once, four bursts a run: first audio max 480-502 against 496-514 ms
yielding however late, 425-490 never; pauses over 60 ms 1 against 8)."""
WAIT_HALF_LIFE = 1.0
"""Seconds in which the queue wait last seen counts half as much: a wait seen in a burst says
less and less of a worker that has not made anyone wait since."""
_INITIAL_COST = 0.1  # lane-seconds of compute per second of audio, until measured
LOAD_FRESH = 0.002
"""Seconds a reading of the load stays current while the queue is unchanged. Every session
reads it after each event and frame it handles (33 times a second of audio in a burst of four),
and each reading sorts the queue: 13 us with 16 segments queued, 142 us with 256 (``python -m
bench planner_load``), so 256 conversations would spend more than the event loop's core on
it. What passes in 2 ms moves every due time by 2 ms, against segments of hundreds."""


def queued_compute(jobs: Iterable[Job], cost: Cost, lanes: int, now: float) -> Queue:
    """``Load.queue`` of the queued ``jobs``: each segment's due time from ``now`` and its
    compute as the cost model puts it, over the lanes, due first first."""
    return tuple(
        sorted(
            (j.due() - now, cost.latency(j.chars) / lanes)
            for j in jobs
            if j.chars and not j.cancelled
        )
    )


def next_job(ready: Sequence[Job], cost: Cost, now: float) -> Job | None:
    """The job due first (ties: the first in ``ready``); but where that is a turn's first
    segment already past its due time (by no more than ``YIELDS_WITHIN``), a cheap segment
    (``PLAYING_JOB``) of a listener already hearing a reply, whose latest start has come, goes
    before it. The first audio then comes that much later, where the listener would have heard
    a gap: a short first segment ("Hmm,", "Well,") ran dry in a burst while the others' first
    segments, all due sooner, took the lanes. 16 at once on the server, eight bursts in two
    runs: no conversation stalled over 100 ms against 2, gaps over 60 ms 5 against 16 ("Hmm, |
    let me": 1 against 10), first audio p95 477 and 494 against 438 and 426 ms; in the model of
    ``bench simulate``, 8 rotations of held-out replies: 18 against 28 of 128 stalled."""
    job = min(ready, key=Job.due, default=None)
    if job is None or not job.first or not 0.0 <= now - job.due() <= YIELDS_WITHIN:
        return job
    playing = [
        j
        for j in ready
        if not j.first
        and j.chars
        and cost.latency(j.chars) <= PLAYING_JOB
        and j.due() - cost.latency(j.chars) <= now
    ]
    return min(playing, key=Job.due) if playing else job


class Planner:
    """The queue of one compute worker with ``lanes`` threads."""

    def __init__(self) -> None:
        self.lanes = 1
        """Set once the engine is built: one, or as many as it can run at once."""
        self.queue: list[Job] = []
        self.running = 0
        self.costs = CostModel(DEFAULT_PRIOR)
        self.cost_per_audio_second = _INITIAL_COST
        """Lane-seconds of compute per second of audio, as measured (an estimate at first)."""
        self._wait = 0.0
        self._wait_at = 0.0
        self._listening: set[Account] = set()
        self._next_quiet = math.inf  # the soonest a listener may have heard all it was given
        self._version = 0  # one more at every change of the queue, its jobs or the lanes
        self._read: tuple[int, float, Load] | None = None  # the last load: version, when

    def changed(self) -> None:
        """Something :meth:`load` reads changed: the next reading computes it afresh."""
        self._version += 1

    @property
    def version(self) -> int:
        return self._version

    def add(self, job: Job, now: float) -> None:
        job._submitted = now
        self.queue.append(job)
        self.changed()

    @property
    def queued(self) -> int:
        return sum(not job.cancelled for job in self.queue)

    def load(self, now: float) -> Load:
        """The worker as sessions pace themselves by it at ``now``: the last reading where
        nothing changed since and it is at most ``LOAD_FRESH`` old."""
        read = self._read
        if read is not None and read[0] == self._version and 0.0 <= now - read[1] <= LOAD_FRESH:
            return read[2]
        cost = self.costs.estimate(now)
        queue = queued_compute(self.queue, cost, self.lanes, now)
        backlog = waits(queue, FIRST_AUDIO_TARGET)
        crowded = self.listeners(now) > self.lanes
        load = Load(self.waited(now), cost, self._idle(), backlog, queue, crowded)
        self._read = (self._version, now, load)
        return load

    def listeners(self, now: float) -> int:
        """Accounts whose listeners still have audio in hand that this worker computed (their
        clocks ahead of ``now``): as many segments can come due at any moment."""
        if now >= self._next_quiet:
            self._listening = {account for account in self._listening if account.clock > now}
            self._next_quiet = min((a.clock for a in self._listening), default=math.inf)
        return len(self._listening)

    def _idle(self) -> bool:
        """A job submitted now would start at once: a lane is free and nothing waits."""
        waiting = any(not job.cancelled for job in self.queue)
        return not waiting and self.running < self.lanes

    def waited(self, now: float) -> float:
        """Seconds a segment waits in the queue before it starts, lately: at once the longest
        wait seen, easing off as the waits shorten and as time passes without one."""
        return self._wait * math.pow(0.5, (now - self._wait_at) / WAIT_HALF_LIFE)

    def take(self, lane: int, now: float) -> tuple[Job | None, list[Job]]:
        """The job due first that ``lane`` may start now, or the cancelled jobs it should
        close first; (None, []) when it must wait."""
        dropped = [job for job in self.queue if job.cancelled and job._lane in (None, lane)]
        if dropped:
            self.queue = [job for job in self.queue if job not in dropped]
            self.changed()
            return None, dropped
        startable = [
            job for job in self.queue if job._lane in (None, lane) and self._may_start(job, now)
        ]
        job = next_job(startable, self.costs.estimate(now), now)
        if job is None:
            return None, []
        self.changed()
        self.queue.remove(job)
        self.running += 1
        if job.pinned:
            job._lane = lane
        if job._steps is None and not job.first:  # it starts now, after its wait
            wait, lately = now - job._submitted, self.waited(now)
            self._wait = wait if wait > lately else 0.9 * lately + 0.1 * wait
            self._wait_at = now
        return job, []

    def drain(self, lane: int) -> list[Job]:
        """The queued jobs ``lane`` may close, taken out of the queue: the worker is stopping."""
        mine = [job for job in self.queue if job._lane in (None, lane)]
        self.queue = [job for job in self.queue if job not in mine]
        self.changed()
        return mine

    def _may_start(self, job: Job, now: float) -> bool:
        """A job held back by its account (given more than the allowance beyond real time)
        may not take the last free lane: it stays for those whose listeners need it."""
        if self.lanes == 1 or self.running < self.lanes - 1 or job.account is None:
            return True
        return job.account.clock - ALLOWANCE <= now

    def stepped(
        self,
        job: Job,
        ended: float,
        lane_seconds: float,
        audio_seconds: float,
        first_audio: bool,
        more: bool,
    ) -> None:
        """A step of ``job`` ended, having given ``audio_seconds`` (its ``first_audio``): learn
        the cost, charge its account, queue it again if it has ``more`` to do."""
        self.changed()
        self.running -= 1
        if first_audio and job.chars:
            self.costs.observe(job.chars, job._computed, ended)
        if audio_seconds:
            rate = lane_seconds / audio_seconds
            self.cost_per_audio_second = 0.9 * self.cost_per_audio_second + 0.1 * rate
            job.gave(ended, audio_seconds)
        if job.account is not None:
            job.account.charge(ended, lane_seconds / self.cost_per_audio_second)
            self._listening.add(job.account)
            self._next_quiet = min(self._next_quiet, job.account.clock)
        if more:
            job.deadline += job.deadline_step
            self.queue.append(job)
