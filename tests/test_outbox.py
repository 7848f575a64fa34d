"""The session's outbox: order, audio accounting, the high mark, and dropping a cut turn."""

from __future__ import annotations

from voicews.core.events import (
    AudioFrame,
    Error,
    Pong,
    SegmentStarted,
    TurnDone,
    TurnStarted,
    WordMark,
    Words,
)
from voicews.core.outbox import Outbox


def frame(turn_id: str, seq: int, samples: int = 10) -> AudioFrame:
    return AudioFrame(turn_id, seq, seq * samples, b"\x00\x00" * samples, samples)


def test_items_go_out_in_order_and_audio_is_counted() -> None:
    box = Outbox(high=100)
    items = [TurnStarted(turn_id="a"), frame("a", 0), frame("a", 1, 30), Pong(id="p")]
    for item in items:
        box.append(item)
    assert (len(box), box.samples, box.frames, box.events) == (4, 40, 2, 2)
    assert list(box) == items  # iterating does not consume
    assert [box.pop() for _ in range(5)] == [*items, None]
    assert (len(box), box.samples, box.frames, box.events) == (0, 0, 0, 0)
    assert not box


def test_full_at_the_high_mark_until_frames_go_out() -> None:
    box = Outbox(high=30)
    box.append(frame("a", 0, 20))
    assert not box.full
    box.append(frame("a", 1, 10))
    assert box.full
    box.append(Error(code="x", message="events do not count"))
    assert box.full and box.samples == 30
    box.pop()
    assert not box.full and box.samples == 10


def test_dropping_a_turn_keeps_other_turns_and_its_errors() -> None:
    box = Outbox(high=1000)
    mark = WordMark(text="hi", start_sample=0)
    kept = [
        TurnStarted(turn_id="new"),
        Error(code="rate_limited", message="refused", turn_id="old"),
        TurnDone(turn_id="old", samples=20, cancelled=True),
        frame("new", 0),
    ]
    dropped = [
        SegmentStarted(turn_id="old", text="hi", start_sample=0),
        Words(turn_id="old", words=[mark]),
        frame("old", 0),
        frame("old", 1),
    ]
    for item in [dropped[0], kept[0], dropped[1], dropped[2], kept[1], dropped[3], *kept[2:]]:
        box.append(item)
    box.drop_turn("old")
    assert list(box) == kept
    assert (box.samples, box.frames, box.events) == (10, 1, 3)


def test_clear_empties_it() -> None:
    box = Outbox(high=10)
    box.append(frame("a", 0, 20))
    box.append(Pong(id="p"))
    box.clear()
    assert (len(box), box.samples, box.frames, box.full) == (0, 0, 0, False)
