"""What a session asks of the compute worker, and the book of what it asked.

The session only records requests and cancellations; the driver above it carries them out
(``take_submissions``, ``take_cancellations``) and feeds the results back by job id.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..engines.base import SynthesisOptions
from .conversation import AgentConfig, Message


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """A segment for the compute worker; ``deadline`` is when the listener runs dry."""

    job_id: int
    turn_id: str
    text: str
    options: SynthesisOptions
    first: bool
    deadline: float
    submitted_at: float


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """Agent mode: generate the reply to ``messages`` on the compute worker."""

    job_id: int
    turn_id: str
    messages: tuple[Message, ...]
    config: AgentConfig


Request = SynthesisRequest | GenerationRequest


class JobBook:
    """A session's job ids, and the requests and cancellations not yet carried out."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._submissions: list[Request] = []
        self._cancellations: list[int] = []

    def next_id(self) -> int:
        return next(self._ids)

    def submit(self, request: Request) -> None:
        self._submissions.append(request)

    def cancel(self, job_ids: list[int]) -> None:
        self._cancellations += job_ids

    def take_submissions(self) -> list[Request]:
        out, self._submissions = self._submissions, []
        return out

    def take_cancellations(self) -> list[int]:
        out, self._cancellations = self._cancellations, []
        return out
