"""A socket's contexts: several turns open at once, one per ``context_id`` (the unnamed one,
None, is a client's that names none). Which turn a worker result is for, which context's text
goes to the engine next (one segment at a time, the oldest unspoken text first), and the cap.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import ErrorCode, VoicewsError
from .pipeline import TurnPipeline


@dataclass(slots=True)
class Context:
    """One context's turns: the live one, and the latest finished one (its last frames may
    still be queued)."""

    live: TurnPipeline | None = None
    finished: TurnPipeline | None = None
    last_turn_id: str | None = None
    last_message: float = 0.0
    """When a message last named it, or its turn ended: its idle clock."""
    queued_at: int = 0
    """The arrival order of its oldest unspoken text: the oldest goes to the engine first."""

    def busy(self) -> bool:
        """It has something to speak: text not yet spoken, or a segment with the engine."""
        live = self.live
        return live is not None and (
            live.turn.in_flight is not None or live.turn.segmenter.has_text
        )


class Contexts:
    def __init__(self, max_contexts: int) -> None:
        self._max = max_contexts
        self._by_id: dict[str | None, Context] = {None: Context()}
        self._arrivals = itertools.count(1)

    def __iter__(self) -> Iterator[Context]:
        return iter(list(self._by_id.values()))

    def items(self) -> list[tuple[str | None, Context]]:
        return list(self._by_id.items())

    def get(self, context_id: str | None) -> Context | None:
        return self._by_id.get(context_id)

    @property
    def unnamed(self) -> Context:
        return self._by_id[None]

    def for_turn(self, context_id: str | None, turn_id: str) -> Context:
        """The context a new turn ``turn_id`` starts in, opened if new; refused for a turn id
        in use, or one context more than the cap."""
        context = self._by_id.get(context_id)
        if context is not None and turn_id == context.last_turn_id:
            raise VoicewsError(
                ErrorCode.DUPLICATE_TURN_ID,
                f"turn_id {turn_id!r} is the latest turn's; use a new id per turn",
                turn_id,
            )
        if any(p is not None and p.turn.id == turn_id for c in self for p in (c.live, c.finished)):
            raise VoicewsError(
                ErrorCode.DUPLICATE_TURN_ID,
                f"turn_id {turn_id!r} is another context's turn; use a new id per turn",
                turn_id,
            )
        if context is None:
            named = len(self._by_id) - 1
            if named >= self._max:
                raise VoicewsError(
                    ErrorCode.TOO_MANY_CONTEXTS,
                    f"{named} contexts are open, the most a socket may hold; "
                    "close one with close_context first",
                    turn_id,
                )
            context = self._by_id[context_id] = Context()
        return context

    def pop(self, context_id: str) -> Context:
        return self._by_id.pop(context_id)

    def queued(self, context_id: str | None) -> None:
        """Text came for a context that had none unspoken: it queues behind the others'."""
        self._by_id[context_id].queued_at = next(self._arrivals)

    def running(self, job_id: int) -> TurnPipeline | None:
        """The live turn a job of the compute worker is for; None for a cancelled one."""
        for context in self:
            if context.live is not None and job_id in context.live.turn.jobs():
                return context.live
        return None

    def by_arrival(self) -> list[Context]:
        """The contexts with a live turn, the oldest unspoken text first."""
        return sorted((c for c in self if c.live is not None), key=lambda c: c.queued_at)

    @property
    def any_live(self) -> bool:
        return any(c.live is not None for c in self)

    @property
    def synthesizing(self) -> bool:
        return any(c.live is not None and c.live.turn.in_flight is not None for c in self)

    def may_cut(self, pipeline: TurnPipeline) -> bool:
        """One segment at a time across contexts, the oldest unspoken text first."""
        mine = self._by_id.get(pipeline.turn.context_id)
        for context in self:
            other = context.live
            if other is None or other is pipeline:
                continue
            if other.turn.in_flight is not None:
                return False
            older = mine is not None and context.queued_at < mine.queued_at
            if older and other.turn.segmenter.has_text:
                return False
        return True

    def idle_at(self, context: Context, idle_s: float) -> float | None:
        """When a named context with nothing to speak will have sat idle too long."""
        if context is self.unnamed or context.busy():
            return None
        return context.last_message + idle_s
