"""The compute worker served to front processes, over a pipe each.

One Python process runs its event loop (sockets, sessions, framing) and the compute worker's
own Python (planning, the batched lane's host steps, the phonemizer) under one interpreter
lock: at a few hundred conversations on a GPU that lock, not the GPU, is the limit. With
``voicews serve --fronts N`` (``voicews/fronts.py``) the engine's process keeps the
:class:`~.execution.ComputeWorker` and a :class:`Hub`, and each front process serves sessions
through a :class:`RemoteWorker`, which the session side uses as it would the worker
(:class:`~.worker.Worker`).

A front sends a segment's text and options, its cancellation, and the end of a session's
account; the hub sends each job's events, the load sessions pace themselves by (every
``READING_EVERY`` while there is work, at once on a change after a quiet spell) and what
``/metrics`` and ``/readyz`` read. The planner, the cost model and the phrase cache are the
hub's, so every front's sessions share one deadline order. As in one process, no event of a
job comes after its cancellation.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pickle
import queue
import socket
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from .. import logs
from ..core.cost import DEFAULT_PRIOR
from ..core.pacing import Load
from ..engines.base import SynthesisOptions
from .execution import ComputeWorker
from .jobs import Account, Job, JobDone, JobEvent, JobFailed, Synthesis, synthesis
from .stats import WorkerFigures

log = logging.getLogger(__name__)

READING_EVERY = 0.01
"""Seconds between the readings of the load sent while there is work (at once on a change
after a quiet spell). In one process a session reads the load afresh at most every
``LOAD_FRESH`` (2 ms); sent that often, the readings cost the engine's process more than the
event loop they took out of it (3.7 against 3.6 ms of CPU per second of audio, 32 Piper
conversations), so a front's sessions pace themselves by a reading at most this old, plus
the pipe's latency."""
QUIET_EVERY = 0.05
"""Seconds between readings sent while no job is queued or running (the lately waited time
eases off meanwhile)."""
FIGURES_EVERY = 0.25
"""Seconds between the figures sent for ``/metrics`` and ``/readyz``."""
GONE = "the compute process is gone"
HELLO_TIMEOUT = 60.0
"""Seconds a front waits for the hub's hello before it gives up."""
MAX_BEHIND = 4096
"""Messages queued for a front that has not read them, at which it is cut off: a stopped or
hung front (some seconds of its sessions' audio at a few hundred conversations). Until then
the queue holds them, not a lane."""


@dataclass(frozen=True, slots=True)
class Hello:
    """The hub's first message: the engine the front's sessions are served by."""

    engine_name: str
    sample_rate: int
    device: str


@dataclass(frozen=True, slots=True)
class Submit:
    job: int
    text: str
    options: SynthesisOptions
    deadline: float
    """On ``time.monotonic``, one clock for every process of the machine."""
    first: bool
    account: int | None
    chars: int


@dataclass(frozen=True, slots=True)
class Cancel:
    job: int


@dataclass(frozen=True, slots=True)
class Forget:
    """The front's session that owned this account is gone."""

    account: int


@dataclass(frozen=True, slots=True)
class Listening:
    """The front accepts connections."""


@dataclass(frozen=True, slots=True)
class Bye:
    """The front stops: the hub closes its end, which ends the front's reader (a pipe closed
    under a thread blocked reading it does not wake the thread)."""


@dataclass(frozen=True, slots=True)
class Event:
    job: int
    event: JobEvent


@dataclass(frozen=True, slots=True)
class Reading:
    load: bytes
    """The pickled :class:`~voicews.core.pacing.Load`: pickled once for every front."""
    seen: int
    """Submissions from this front the hub had taken when it read the load."""


class Front:
    """The hub's side of one front: its jobs and accounts, and the pipe's two directions: its
    reader thread, and its sender thread, which writes what the lanes and the hub queue for
    it, so that a front that stops reading holds up no lane (every other front's sessions)."""

    def __init__(self, index: int, conn: Connection, worker: ComputeWorker) -> None:
        self.index = index
        self._conn = conn
        self._worker = worker
        self._outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ending = threading.Lock()
        self._threads_left = 2
        self._jobs: dict[int, Job] = {}
        self._accounts: dict[int, Account] = {}
        self.seen = 0
        self.listening = threading.Event()
        self.gone = threading.Event()
        """Its pipe is closed, or it fell ``MAX_BEHIND`` behind and was cut off; its jobs are
        cancelled."""

    def start(self) -> None:
        for name, target in (("reader", self.serve), ("sender", self._send_queued)):
            thread_name = f"voicews-hub-front-{self.index}-{name}"
            threading.Thread(target=target, name=thread_name, daemon=True).start()

    def send(self, message: Any) -> None:
        """Queue ``message`` for the front (dropped if it is gone)."""
        if self.gone.is_set():
            return
        if self._outgoing.qsize() >= MAX_BEHIND:
            logs.event("front_cut_off", front=self.index, behind=MAX_BEHIND)
            self.cut_off()
            return
        self._outgoing.put(message)

    def cut_off(self) -> None:
        """Stop serving the front: its pipe shut both ways, so its reader (here and there)
        ends and its jobs are cancelled; its process is the starter's to end."""
        self.gone.set()
        self._outgoing.put(None)
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(self._conn.fileno())) as end:
            end.shutdown(socket.SHUT_RDWR)

    def _send_queued(self) -> None:
        try:
            while (message := self._outgoing.get()) is not None:
                self._conn.send(message)
        except (OSError, ValueError):
            self.gone.set()
        finally:
            self._ended()

    def _ended(self) -> None:
        """The pipe is closed by the second of its two threads to end (a descriptor closed
        under the other could be reused before it reads it)."""
        with self._ending:
            self._threads_left -= 1
            if not self._threads_left:
                self._conn.close()

    def serve(self) -> None:
        try:
            while True:
                message = self._conn.recv()
                match message:
                    case Submit():
                        self._submit(message)
                    case Cancel(job=job_id):
                        if (job := self._jobs.pop(job_id, None)) is not None:
                            self._worker.cancel(job)
                    case Forget(account=key):
                        self._accounts.pop(key, None)
                    case Listening():
                        self.listening.set()
                    case Bye():
                        return
                    case _:
                        raise TypeError(f"front {self.index} sent {message!r}")
        except (EOFError, OSError):
            pass
        except Exception:
            log.exception("front %d: message failed; its jobs are cancelled", self.index)
        finally:
            self.gone.set()
            self._outgoing.put(None)
            for job in list(self._jobs.values()):
                self._worker.cancel(job)
            self._jobs.clear()
            self._ended()

    def _submit(self, message: Submit) -> None:
        key = message.account
        account = None if key is None else self._accounts.setdefault(key, Account())
        job = Job(
            synthesis(message.text, message.options),
            message.deadline,
            partial(self._event, message.job),
            first=message.first,
            account=account,
            chars=message.chars,
        )
        self._jobs[message.job] = job  # before submit: a kept phrase gives its events at once
        self.seen += 1
        self._worker.submit(job)

    def _event(self, job_id: int, event: JobEvent) -> None:
        if isinstance(event, JobDone | JobFailed):
            self._jobs.pop(job_id, None)
        self.send(Event(job_id, event))


class Hub:
    """In the engine's process: the fronts' jobs run on ``worker``, and each front is told
    its jobs' events and the worker's load and figures."""

    def __init__(self, worker: ComputeWorker) -> None:
        self._worker = worker
        self._fronts: dict[int, Front] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._publisher = threading.Thread(target=self._publish, name="voicews-hub", daemon=True)

    def start(self) -> None:
        self._publisher.start()

    def stop(self) -> None:
        self._stopping.set()
        self._publisher.join()

    def attach(self, index: int, conn: Connection) -> Front:
        """Serve front ``index`` over ``conn`` (in place of a front of that index before)."""
        worker = self._worker
        front = Front(index, conn, worker)
        front.send(Hello(worker.engine_name, worker.sample_rate, worker.device))
        front.send(worker.figures())
        front.send(Reading(pickle.dumps(worker.load()), 0))
        with self._lock:
            self._fronts[index] = front
        front.start()
        return front

    def _publish(self) -> None:
        """A reading at once when the worker changes after a quiet spell, then at most one
        every ``READING_EVERY`` (a few hundred sessions change it every millisecond); pickled
        once for every front."""
        worker, version, last = self._worker, -1, None
        figures_at = sent_at = -FIGURES_EVERY
        while not self._stopping.is_set():
            quiet = last is not None and last.idle and not last.queue
            version = worker.changed_since(version, QUIET_EVERY if quiet else READING_EVERY)
            time.sleep(max(0.0, sent_at + READING_EVERY - time.monotonic()))
            load = worker.load()
            now = sent_at = time.monotonic()
            figures = None
            if now - figures_at >= FIGURES_EVERY:
                figures, figures_at = worker.figures(), now
            with self._lock:
                fronts = [front for front in self._fronts.values() if not front.gone.is_set()]
            pickled = pickle.dumps(load) if load != last else None
            for front in fronts:
                if pickled is not None:
                    front.send(Reading(pickled, front.seen))
                if figures is not None:
                    front.send(figures)
            last = load


class RemoteWorker:
    """In a front process: the engine's process's worker as its sessions see it
    (:class:`~.worker.Worker`). ``submit`` and ``cancel`` are called on the event loop; the
    jobs' events come to their ``on_event`` on this worker's reader thread, as a worker's
    lanes give them. If the hub goes, every job not done fails and ``gone`` is set."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._sending = threading.Lock()
        self._jobs: dict[int, Job] = {}
        self._ids: dict[Job, int] = {}
        self._next_job = itertools.count()
        self._accounts: weakref.WeakKeyDictionary[Account, int] = weakref.WeakKeyDictionary()
        self._next_account = itertools.count()
        self._forgotten: deque[int] = deque()
        self._submitted = 0
        self._load = Load(0.0, DEFAULT_PRIOR)
        self._figures = WorkerFigures()
        self._hello = threading.Event()
        self._reader = threading.Thread(target=self._read, name="voicews-front", daemon=True)
        self.gone = threading.Event()
        self.warmed = threading.Event()
        self.warm_seconds = 0.0
        self.engine_name = ""
        self.sample_rate = 0
        self.device = ""

    def start(self) -> None:
        """Wait for the hub's hello."""
        self._reader.start()
        if not self._hello.wait(HELLO_TIMEOUT) or self.gone.is_set():
            raise RuntimeError("the compute process did not answer")

    def stop(self) -> None:
        """Say bye and wait for the hub to close its end (the reader then ends)."""
        self._send(Bye())
        if self._reader.is_alive():
            self._reader.join(HELLO_TIMEOUT)

    def listening(self) -> None:
        """Tell the hub this front accepts connections."""
        self._send(Listening())

    def submit(self, job: Job) -> None:
        if not isinstance(job.run, Synthesis):
            raise TypeError("a front process sends only syntheses to the compute process")
        if self.gone.is_set():
            job.on_event(JobFailed(GONE))
            return
        job_id = next(self._next_job)
        self._jobs[job_id], self._ids[job] = job, job_id
        self._submitted += 1
        if self._load.idle:  # not for the sessions that read the load before the next reading
            self._load = replace(self._load, idle=False)
        run = job.run
        self._send(
            Submit(
                job_id,
                run.text,
                run.options,
                job.deadline,
                job.first,
                None if job.account is None else self._account(job.account),
                job.chars,
            )
        )
        if self.gone.is_set() and self._jobs.pop(job_id, None) is not None:
            self._ids.pop(job, None)  # gone meanwhile, after the reader failed the others
            job.on_event(JobFailed(GONE))

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        job_id = self._ids.pop(job, None)
        if job_id is not None:
            self._jobs.pop(job_id, None)
            self._send(Cancel(job_id))

    def load(self) -> Load:
        return self._load

    @property
    def overloaded(self) -> bool:
        return self._figures.overloaded

    def figures(self) -> WorkerFigures:
        return self._figures

    def _account(self, account: Account) -> int:
        key = self._accounts.get(account)
        if key is None:
            key = self._accounts[account] = next(self._next_account)
            # Not sent from the finalizer: it may run inside a send, on any thread.
            weakref.finalize(account, self._forgotten.append, key)
        return key

    def _send(self, message: Any) -> None:
        try:
            with self._sending:
                while self._forgotten:
                    self._conn.send(Forget(self._forgotten.popleft()))
                self._conn.send(message)
        except (OSError, ValueError):
            self.gone.set()  # the reader fails the jobs

    def _read(self) -> None:
        try:
            while True:
                self._take(self._conn.recv())
        except (EOFError, OSError):
            pass
        finally:
            self._conn.close()
            self.gone.set()
            self._hello.set()
            jobs = list(self._jobs.values())
            self._jobs.clear()
            self._ids.clear()
            for job in jobs:
                job.on_event(JobFailed(GONE))

    def _take(self, message: Any) -> None:
        match message:
            case Event(job=job_id, event=event):
                job = self._jobs.get(job_id)
                if job is None or job.cancelled:
                    return
                if isinstance(event, JobDone | JobFailed):
                    self._jobs.pop(job_id, None)
                    self._ids.pop(job, None)
                job.on_event(event)
            case Reading(load=pickled, seen=seen):
                load = pickle.loads(pickled)
                if load.idle and seen < self._submitted:
                    load = replace(load, idle=False)
                self._load = load
            case WorkerFigures():
                self._figures = message
                self.warm_seconds = message.warm_seconds
                if not message.warming:
                    self.warmed.set()
            case Hello(engine_name=name, sample_rate=rate, device=device):
                self.engine_name, self.sample_rate, self.device = name, rate, device
                self._hello.set()
            case _:
                raise TypeError(f"the compute process sent {message!r}")
