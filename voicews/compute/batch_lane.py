"""The batched lane: one thread that steps the decoder windows of every active session at once.

A GPU decodes a batch of windows in about the time of one (issue 33: 4.6 ms a 64-frame window
alone on an H200, 0.20 ms each in a batch of 64), so for an engine that decodes in windows
(``WindowedEngine``) the worker's one lane does not run one session's step at a time: it takes
every job the planner has due, runs each one's host part up to its next window, and hands the
window to the :class:`Gatherer`, which says when a batch is due (full, or its most urgent
window has waited ``batch_wait`` or reached its deadline) and which windows are in it (one
bucket, deadline order). One decoder step decodes
them; each session gets its own window's audio, and its job goes back to the planner for its
next window. A sentence's encoder, durations and flow come before its first window: the jobs
that begin a sentence in the same host step begin it in one batch (``WindowedEngine.begin``).
Jobs that yield no windows (a generation in agent mode) run one step at a time, as on any lane.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any, cast

from ..engines.base import Begin, Window, WindowedEngine
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
        self._begun: dict[Job, tuple[float, float, Begin]] = {}
        """Jobs stopped at a sentence's beginning: when their host step began, its seconds so
        far, and what the sentence needs (:meth:`_begin`)."""
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
                self._advance(job)
                if job in self._begun:  # the jobs due with it begin theirs beside it
                    for other in self._due_with(lane):
                        self._advance(other)
                self._begin()
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

    def _due_with(self, lane: int) -> list[Job]:
        """The other jobs due now, up to a batch: their host parts run next, and those that
        begin a sentence begin it with the job that took them."""
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

    def _begin(self) -> None:
        """The sentences the jobs stopped at begin together, then each job's host part goes
        on to its window: two or more in one batch (``WindowedEngine.begin``), each booked a
        share of its seconds; one alone, as it would without the lane. Where the batch fails,
        each begins alone, and meets its own error there."""
        while self._begun:  # one that begins a sentence of no windows begins its next
            self._begin_all()

    def _begin_all(self) -> None:
        begun, self._begun = self._begun, {}
        made: list[object | None] = [None] * len(begun)
        share = 0.0
        if len(begun) > 1:
            worker = self._worker
            started = worker._clock()
            try:
                made = list(self._engine.begin([b.sentence for _, _, b in begun.values()]))
            except Exception:
                log.exception("beginning %d sentences together failed: each alone", len(begun))
            else:
                ended = worker._clock()
                worker.stats.record(ended, ended - started)
                worker.stats.begun(len(begun))
                share = (ended - started) / len(begun)
        for (job, (started, host, _)), sent in zip(begun.items(), made, strict=True):
            self._advance(job, host + share, sent, started)

    def _cancelled(self) -> bool:
        return any(job.cancelled for job in self._started)

    def _drop_cancelled(self) -> None:
        """Windows of cut turns leave the gatherer before they cost a decoder step."""
        for job in [job for job in self._started if job.cancelled]:
            self._gather.drop(job)
            self._finish(job, self._worker._clock(), 0.0, False, 0.0)
            close(job)

    def _advance(
        self, job: Job, before: float = 0.0, sent: object | None = None, since: float | None = None
    ) -> None:
        """Run ``job``'s host part up to its next window, which joins the gatherer, or to a
        sentence's beginning, where it waits for :meth:`_begin`; anything else it yields
        (audio, text, its end) goes to its session as one step, and word starts go with what
        follows them. Resumed from a beginning: ``sent`` goes back to it, ``before`` is the
        seconds of its host step so far (its share of the batch too), begun at ``since``."""
        worker, engine = self._worker, self._engine
        started = worker._clock()
        first = since if since is not None else started
        resumed = since is not None
        while True:
            try:
                steps = job._steps
                if steps is None:
                    work = job.run
                    if isinstance(work, Synthesis):
                        steps = job._steps = engine.windows_of(work.text, work.options)
                    else:
                        steps = job._steps = work(engine)
                if resumed:
                    resumed = False
                    item = _send(steps, sent)
                else:
                    item = next(steps, None)
                if isinstance(item, Begin):
                    ended = worker._clock()
                    worker.stats.record(ended, ended - started)
                    self._begun[job] = (first, before + ended - started, item)
                    return
                if isinstance(item, Window):
                    ended = worker._clock()
                    worker.stats.record(ended, ended - started)
                    self._started[job], self._host[job] = first, before + ended - started
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
        job._computed += before + ended - started
        worker._stepped(job, first, ended, before + ended - started, more, audio_seconds)

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


def _send(steps: Iterator[Any], value: object | None) -> Any:
    """``steps``' next item, ``value`` sent to the item before it (None at its end)."""
    try:
        return cast(Generator[Any, object | None, None], steps).send(value)
    except StopIteration:
        return None


def _again(item: Any, rest: Iterator[Any]) -> Iterator[Any]:
    """``item``, then ``rest``; closing it closes ``rest`` (``jobs.close``)."""
    try:
        yield item
        yield from rest
    finally:
        if isinstance(rest, Generator):
            rest.close()
