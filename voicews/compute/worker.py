"""What the session side sees of the compute worker: the one in this process
(``execution.ComputeWorker``), or a front process's view of the one that owns the engine in
another (``remote.RemoteWorker``)."""

from __future__ import annotations

import threading
from typing import Protocol

from ..core.pacing import Load
from .jobs import Job
from .stats import WorkerFigures


class Worker(Protocol):
    engine_name: str
    sample_rate: int
    device: str
    warmed: threading.Event
    """Set once the engine is built and warmed; ``/readyz`` says ``warming`` until then."""
    warm_seconds: float

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def submit(self, job: Job) -> None:
        """Queue ``job``; its events come to ``job.on_event`` on another thread."""

    def cancel(self, job: Job) -> None:
        """Stop ``job``: no event of it comes after this."""

    def load(self) -> Load: ...

    @property
    def overloaded(self) -> bool: ...

    def figures(self) -> WorkerFigures: ...
