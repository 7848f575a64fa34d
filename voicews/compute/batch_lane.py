"""The batched lane: one thread that steps the decoder windows of every active session at once.

A GPU decodes a batch of windows in about the time of one (issue 33: 4.6 ms a 64-frame window
alone on an H200, 0.20 ms each in a batch of 64), so for an engine that decodes in windows
(``WindowedEngine``) the worker's one lane does not run one session's step at a time: it takes
every job the planner has due, runs each one's host part (its next window; a new sentence's
encoder, durations and flow) and hands the window to the :class:`Gatherer`, which says when a
batch is due (full, or its most urgent window has waited ``batch_wait`` or reached its
deadline) and which windows are in it (one bucket, deadline order). One decoder step decodes
them; each session gets its own window's audio, and its job goes back to the planner for its
next window. Jobs that yield no windows (a generation in agent mode) run one step at a time,
as on any lane.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any, cast

from ..engines.base import Window, WindowedEngine
from .batching import Gatherer, Ready
from .jobs import Job, JobAudio, JobWords, Synthesis, close, event_of

if TYPE_CHECKING:
    from .execution import ComputeWorker

log = logging.getLogger(__name__)

_POLL = 0.05
"""Longest sleep while windows wait for a batch (the deadlines' clock may not be the
thread's: tests drive a fake one)."""


class BatchLane:
    """Serves ``worker``'s queue with ``engine`` until the worker stops."""

    def __init__(self, worker: ComputeWorker, engine: WindowedEngine) -> None:
        self._worker, self._engine = worker, engine
        self._gather: Gatherer[Window] = Gatherer(
            max_batch=engine.max_batch, max_wait=engine.batch_wait, bucket=engine.window_bucket
        )
        self._started: dict[Job, float] = {}
        """The jobs whose windows wait in the gatherer: when each one's host step began."""
        self._host: dict[Job, float] = {}  # and the seconds it took
        self._worded: set[Job] = set()
        """Jobs that placed their words: an engine places them just before its last window,
        so the step that decodes that window takes the job's end with it (as ``_step`` does
        on a plain lane): its session may ask for its next segment at once, not when the job
        comes round again behind every window due sooner."""

    def serve(self) -> None:
        worker, lane = self._worker, threading.get_ident()
        while True:
            with worker._cond:
                job, dropped = self._next(lane)
            for cancelled in dropped:
                close(cancelled)
            if job is None and worker._stopping:
                for waiting in self._started:
                    close(waiting)
                return
            self._drop_cancelled()
            if job is not None:
                jobs = [job, *self._starting_with(job, lane)]
                shares = self._prepare(jobs)
                for each in jobs:
                    self._advance(each, shares.get(each, 0.0))
            with worker._cond:  # jobs still queued: their windows are moments away
                pending = worker._plan.queued > 0
            batch = self._gather.take(worker._clock(), pending)
            if batch:
                self._decode(batch)

    def _next(self, lane: int) -> tuple[Job | None, list[Job]]:
        """With the lock held: the job due first, the cancelled jobs to close, or (None, [])
        once a batch is due; when the worker stops, None and every queued job this lane may
        close (a generation's generator must be finalized on the thread that made it)."""
        worker = self._worker
        while not worker._stopping:
            now = worker._clock()
            job, dropped = worker._plan.take(lane, now)
            if job is not None or dropped:
                return job, dropped
            due = self._gather.due_at()
            if due is not None and (due <= now or self._cancelled()):
                return None, []
            worker._cond.wait(None if due is None else min(_POLL, due - now))
        return None, worker._plan.drain(lane)

    def _starting_with(self, job: Job, lane: int) -> list[Job]:
        """Where ``job`` starts a synthesis, the other jobs due now, up to a batch: their
        host parts run next, and those that start theirs are prepared together with it."""
        if not _starts(job):
            return []
        worker = self._worker
        more: list[Job] = []
        cancelled: list[Job] = []
        with worker._cond:
            while len(more) + 1 < self._engine.max_batch:
                other, dropped = worker._plan.take(lane, worker._clock())
                cancelled += dropped
                if other is not None:
                    more.append(other)
                elif not dropped:
                    break
        for each in cancelled:
            close(each)
        return more

    def _prepare(self, jobs: list[Job]) -> dict[Job, float]:
        """The syntheses among ``jobs`` that start now, begun together
        (``WindowedEngine.prepare``: one batch of their first sentences' encoders, durations
        and flows, where each alone is one); each one's share of its seconds. Where it fails,
        each begins alone, and meets its own error there."""
        starting = [job for job in jobs if _starts(job)]
        if len(starting) < 2:
            return {}
        worker = self._worker
        started = worker._clock()
        runs = [cast(Synthesis, job.run) for job in starting]
        try:
            prepared = self._engine.prepare([(run.text, run.options) for run in runs])
        except Exception:
            log.exception("preparing %d syntheses together failed: each begins alone", len(runs))
            return {}
        for job, run, ready in zip(starting, runs, prepared, strict=True):
            job._steps = self._engine.windows_of(run.text, run.options, ready)
        ended = worker._clock()
        worker.stats.record(ended, ended - started)
        worker.stats.prepared(len(starting))
        return {job: (ended - started) / len(starting) for job in starting}

    def _cancelled(self) -> bool:
        return any(job.cancelled for job in self._started)

    def _drop_cancelled(self) -> None:
        """Windows of cut turns leave the gatherer before they cost a decoder step."""
        for job in [job for job in self._started if job.cancelled]:
            self._gather.drop(job)
            self._finish(job, self._worker._clock(), 0.0, False, 0.0)
            close(job)

    def _advance(self, job: Job, shared: float = 0.0) -> None:
        """Run ``job``'s host part up to its next window, which joins the gatherer; anything
        else it yields (audio, text, its end) goes to its session as one step, and word starts
        go with what follows them. ``shared``: its part of a host step run with others'
        (:meth:`_prepare`), booked to it with its own."""
        worker, engine = self._worker, self._engine
        started = worker._clock()
        while True:
            try:
                if job._steps is None:
                    work = job.run
                    if isinstance(work, Synthesis):
                        job._steps = engine.windows_of(work.text, work.options)
                    else:
                        job._steps = work(engine)
                item = next(job._steps, None)
                if isinstance(item, Window):
                    ended = worker._clock()
                    worker.stats.record(ended, ended - started)
                    self._started[job], self._host[job] = started, ended - started + shared
                    self._gather.offer(job, item.frames, job.due(), item, ended)
                    return
                event = None if item is None else event_of(item)
            except Exception as exc:
                more, audio_seconds = worker._failed(job, exc)
                break
            more, audio_seconds = worker._deliver(job, event)
            if not (more and isinstance(event, JobWords)):
                break
            self._worded.add(job)
        self._worded.discard(job)
        ended = worker._clock()
        worker.stats.record(ended, ended - started)
        job._computed += ended - started + shared
        worker._stepped(job, started, ended, ended - started + shared, more, audio_seconds)

    def _decode(self, batch: list[Ready[Window]]) -> None:
        """One decoder step for ``batch``'s windows; each job gets its own audio."""
        worker = self._worker
        jobs = [cast(Job, ready.stream) for ready in batch]
        started = worker._clock()
        try:
            audio = self._engine.decode_windows([ready.item for ready in batch])
        except Exception as exc:
            ended = worker._clock()
            worker.stats.record(ended, ended - started)
            for job in jobs:
                self._finish(job, ended, (ended - started) / len(jobs), *worker._failed(job, exc))
            return
        ended = worker._clock()
        seconds = ended - started
        worker.stats.record(ended, seconds)
        worker.stats.batched(len(jobs))
        for job, samples in zip(jobs, audio, strict=True):
            more, audio_seconds = worker._deliver(job, JobAudio(samples))
            if more and job in self._worded:
                more = self._ended(job)
            self._finish(job, ended, seconds / len(jobs), more, audio_seconds, waited=seconds)

    def _ended(self, job: Job) -> bool:
        """After the window a job placed its words before, its end: whether it has more to
        do after all (then what came is kept for its next step)."""
        worker = self._worker
        self._worded.discard(job)
        assert job._steps is not None
        try:
            item = next(job._steps, None)
        except Exception as exc:
            more, _ = worker._failed(job, exc)
            return more
        if item is None:
            more, _ = worker._deliver(job, None)
            return more
        job._steps = _again(item, job._steps)
        return True

    def _finish(
        self,
        job: Job,
        ended: float,
        share: float,
        more: bool,
        audio_seconds: float,
        waited: float = 0.0,
    ) -> None:
        """Book ``job``'s step: its host part and its ``share`` of the decoder step, to its
        account; to its first audio, the ``waited`` seconds of the whole decoder step."""
        started, host = self._started.pop(job), self._host.pop(job)
        job._computed += host + max(share, waited)
        self._worker._stepped(job, started, ended, host + share, more, audio_seconds)


def _starts(job: Job) -> bool:
    """Whether ``job`` is a synthesis that has not begun."""
    return job._steps is None and isinstance(job.run, Synthesis)


def _again(item: Any, rest: Iterator[Any]) -> Iterator[Any]:
    """``item``, then ``rest``; closing it closes ``rest`` (``jobs.close``)."""
    try:
        yield item
        yield from rest
    finally:
        if isinstance(rest, Generator):
            rest.close()
