"""Drives one sans-I/O session on the event loop: worker jobs, timers, and the outbox.

Shared by the WebSocket endpoint and the streaming HTTP endpoint, so both go through the
same segmenter, stitcher and compute worker. The session's synthesis is charged to its worker
account: its own (a WebSocket session, a Wyoming connection: a live listener), or (one-shot
HTTP requests) one the requests share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar, assert_never

from .compute.jobs import (
    Account,
    Job,
    JobAudio,
    JobDone,
    JobEvent,
    JobFailed,
    JobText,
    JobWords,
    Work,
    synthesis,
)
from .compute.worker import Worker
from .core.events import Outgoing
from .core.jobs import GenerationRequest, Request, SynthesisRequest
from .core.session import Session
from .text.segmenter import spoken_length

Sent = TypeVar("Sent")
Received = TypeVar("Received")
Generate = Callable[[GenerationRequest], Work]
"""Agent mode: the work that writes the reply a generation request asks for."""

# Agent mode: each generated token pushes the generation's deadline back by this much, so
# segments whose listeners run dry sooner go first ("a few tokens, then let speech run").
TOKEN_DEADLINE_STEP = 0.02

# A client that keeps sending without reading piles up error events; past this many unsent
# events the connection stops reading its frames (TCP pushes back) until it reads again.
MAX_QUEUED_EVENTS = 64


class SessionDriver:
    def __init__(
        self,
        session: Session,
        worker: Worker,
        observe: Callable[[Session], None] = lambda _: None,
        generate: Generate | None = None,
        account: Account | None = None,
    ) -> None:
        self.session = session
        self._account = account or Account()
        self._generate = generate
        self._worker = worker
        self._observe = observe
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._jobs: dict[int, Job] = {}
        self._timer: asyncio.TimerHandle | None = None

    def now(self) -> float:
        return self._loop.time()

    async def next_item(self) -> Outgoing | None:
        """The next event or frame to send; None once the session asked to close."""
        while True:
            item = self.session.outbox.pop()
            if item is not None:
                self.refresh()
                self.session.sent(item, self.now())  # may free room for the next segment
                self.sync()
                return item
            if self.session.close_request is not None:
                return None
            self._wake.clear()
            await self._wake.wait()

    async def room_for_input(self) -> None:
        """Wait until the client has read enough of what it was sent to take more frames."""
        await self._room.wait()

    def sync(self) -> None:
        """Carry the session's requests out: jobs to the worker, wake the sender, set timer.
        The timer is set from the load the session acted on (``refresh`` comes before it
        acts, not here), so its cut times and its urgency read the same queue."""
        session = self.session
        if session.outbox.events < MAX_QUEUED_EVENTS:
            self._room.set()
        else:
            self._room.clear()
        for request in session.take_submissions():
            job = self._job(request)
            self._jobs[request.job_id] = job
            self._worker.submit(job)
        for job_id in session.take_cancellations():
            cancelled = self._jobs.pop(job_id, None)
            if cancelled is not None:
                self._worker.cancel(cancelled)
        if session.outbox or session.close_request is not None:
            self._wake.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wake_at = session.wakeup_at(self.now())
        if wake_at is not None:
            self._timer = self._loop.call_at(wake_at, self._tick)
        self._observe(session)

    def refresh(self) -> None:
        """Tell the session what the compute worker is doing now, before it takes a message, a
        timer, a job's event or a sent frame: other sessions may have asked for compute since
        (16 sessions whose second words come in the same instant would each see the worker
        idle, and try their first words at once). Once per event: a refresh between its cut
        and its timer let the urgency and the cut times read different queues, and a timer
        that found them disagreeing set no next one (a turn waited with its last sentence in
        hand)."""
        self.session.load(self._worker.load())

    async def serve(
        self, send_loop: Coroutine[Any, Any, Sent], receive_loop: Coroutine[Any, Any, Received]
    ) -> tuple[asyncio.Task[Sent], asyncio.Task[Received]]:
        """Run a connection's send and receive loops until either ends, then close the session
        and stop the other. The first to end ends both: the receive loop may be waiting for the
        client to read (backpressure) when the peer vanishes, and only the send loop, failing
        to write, then knows it."""
        sender = asyncio.create_task(send_loop)
        receiver = asyncio.create_task(receive_loop)
        try:
            await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.close()
            for task in (receiver, sender):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
        return sender, receiver

    def close(self) -> None:
        """The peer is gone: cancel everything the session had running."""
        self.session.close()
        self.sync()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _job(self, request: Request) -> Job:
        on_event = partial(self._from_worker, request.job_id)
        match request:
            case SynthesisRequest():
                work = synthesis(request.text, request.options)
                return Job(
                    work,
                    request.deadline,
                    on_event,
                    first=request.first,
                    account=self._account,
                    chars=spoken_length(request.text),
                )
            case GenerationRequest():
                assert self._generate is not None, "agent mode without a generator"
                work = self._generate(request)
                return Job(
                    work, self.now(), on_event, deadline_step=TOKEN_DEADLINE_STEP, pinned=True
                )
            case _:
                assert_never(request)

    def _tick(self) -> None:
        self._timer = None
        self.refresh()
        self.session.tick(self.now())
        self.sync()

    def _from_worker(self, job_id: int, event: JobEvent) -> None:
        """Runs on the compute thread: hand the event to the event loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self._loop.call_soon_threadsafe(self._on_job_event, job_id, event)

    def _on_job_event(self, job_id: int, event: JobEvent) -> None:
        self.refresh()
        session, now = self.session, self.now()
        match event:
            case JobAudio(audio=audio, replay=replay):
                session.on_audio(job_id, audio, now, replay)
            case JobText(text=text):
                session.on_text(job_id, text, now)
            case JobWords(starts=starts):
                session.on_words(job_id, starts.samples)
            case JobDone():
                self._jobs.pop(job_id, None)
                session.on_done(job_id, now)
            case JobFailed(message=message):
                self._jobs.pop(job_id, None)
                session.on_failed(job_id, message, now)
            case _:
                assert_never(event)
        self.sync()
