"""What a session has to send, in order: events and audio frames, the audio counted.

The counterpart of websockets' ``Assembler``, on the sending side: audio queued up to the high
mark means the socket is not keeping up, so the session submits no more synthesis (``full``)
until frames go out; a barge-in drops a turn's unsent audio and the events about it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from .events import AudioFrame, Outgoing, SegmentStarted, Words


class Outbox:
    """``high``: samples of queued audio at which the outbox counts as full."""

    def __init__(self, high: int) -> None:
        self.high = high
        self.samples = 0
        """Samples of audio queued."""
        self.frames = 0
        self._items: deque[Outgoing] = deque()

    def append(self, item: Outgoing) -> None:
        if isinstance(item, AudioFrame):
            self.samples += item.samples
            self.frames += 1
        self._items.append(item)

    def extend(self, items: Iterable[Outgoing]) -> None:
        for item in items:
            self.append(item)

    def pop(self) -> Outgoing | None:
        """The next thing to send, or None."""
        if not self._items:
            return None
        item = self._items.popleft()
        if isinstance(item, AudioFrame):
            self.samples -= item.samples
            self.frames -= 1
        return item

    def drop_turn(self, turn_id: str) -> None:
        """Barge-in: the turn's unsent audio, segment and word events go; its errors (and its
        ``turn_done``) stay."""
        kept: deque[Outgoing] = deque()
        for item in self._items:
            if isinstance(item, AudioFrame | SegmentStarted | Words) and item.turn_id == turn_id:
                if isinstance(item, AudioFrame):
                    self.samples -= item.samples
                    self.frames -= 1
                continue
            kept.append(item)
        self._items = kept

    def clear(self) -> None:
        self._items.clear()
        self.samples = self.frames = 0

    @property
    def full(self) -> bool:
        return self.samples >= self.high

    @property
    def events(self) -> int:
        """Events (not audio frames) queued."""
        return len(self._items) - self.frames

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Outgoing]:
        return iter(self._items)
