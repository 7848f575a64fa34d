"""The gatherer of ready windows: plain items, a fake clock (times are plain floats)."""

from __future__ import annotations

import pytest

from voicews.compute.batching import Gatherer


def buckets(frames: int) -> int:
    """Window lengths padded as the MLX Piper decoder pads them."""
    return next(size for size in (8, 16, 32, 64, 80) if frames <= size)


def gatherer(max_batch: int = 4, max_wait: float = 0.004) -> Gatherer[str]:
    return Gatherer(max_batch=max_batch, max_wait=max_wait, bucket=buckets)


def test_a_lone_window_waits_max_wait_for_company_then_goes() -> None:
    g = gatherer()
    assert g.due_at() is None and g.take(0.0) == []
    g.offer("a", 64, deadline=11.0, item="a0", now=10.0)
    assert g.due_at() == pytest.approx(10.004)
    assert g.take(10.003) == []
    (ready,) = g.take(10.004)
    assert (ready.stream, ready.item, ready.bucket) == ("a", "a0", 64)
    assert len(g) == 0 and g.due_at() is None


def test_a_full_batch_goes_at_once_in_deadline_order_and_the_rest_waits() -> None:
    g = gatherer(max_batch=3)
    for i, deadline in enumerate([5.0, 2.0, 4.0, 1.0, 3.0]):
        g.offer(f"s{i}", 64, deadline=deadline, item=f"w{i}", now=0.0)
    assert g.due_at() == float("-inf")
    assert [r.item for r in g.take(0.0)] == ["w3", "w1", "w4"]
    assert g.due_at() == pytest.approx(0.004)  # two left: not full, so they wait
    assert [r.item for r in g.take(0.004)] == ["w2", "w0"]


def test_windows_of_other_buckets_are_not_mixed_and_the_most_urgent_bucket_goes_first() -> None:
    g = gatherer()
    g.offer("late", 60, deadline=9.0, item="64-late", now=0.0)
    g.offer("first", 8, deadline=1.0, item="8", now=0.0)
    g.offer("soon", 64, deadline=2.0, item="64-soon", now=0.0)
    g.offer("odd", 70, deadline=0.5, item="80", now=0.001)  # most urgent, alone in bucket 80
    assert [(r.item, r.bucket) for r in g.take(0.005)] == [("80", 80)]
    assert [r.item for r in g.take(0.005)] == ["8"]
    assert [r.item for r in g.take(0.005)] == ["64-soon", "64-late"]


def test_a_deadline_sooner_than_max_wait_is_not_waited_past() -> None:
    g = gatherer(max_wait=0.010)
    g.offer("a", 32, deadline=5.002, item="a", now=5.0)
    assert g.due_at() == pytest.approx(5.002)
    assert g.take(5.001) == []
    assert [r.item for r in g.take(5.002)] == ["a"]
    g.offer("b", 32, deadline=4.0, item="b", now=5.0)  # already late: goes at once
    assert [r.item for r in g.take(5.0)] == ["b"]


def test_while_more_windows_are_coming_a_late_window_waits_max_wait_for_them() -> None:
    g = gatherer(max_wait=0.010)
    g.offer("late", 32, deadline=1.0, item="late", now=5.0)  # its listener already ran dry
    assert g.due_at() == pytest.approx(1.0)
    assert g.due_at(pending=True) == pytest.approx(5.010)
    assert g.take(5.005, pending=True) == []
    g.offer("next", 32, deadline=9.0, item="next", now=5.006)
    assert [r.item for r in g.take(5.010, pending=True)] == ["late", "next"]


def test_one_window_per_stream_and_a_dropped_stream_leaves_nothing() -> None:
    g = gatherer()
    g.offer("a", 16, deadline=1.0, item="a0", now=0.0)
    with pytest.raises(ValueError, match="already has a window"):
        g.offer("a", 16, deadline=1.0, item="a1", now=0.0)
    g.offer("b", 16, deadline=2.0, item="b0", now=0.0)
    g.drop("a")
    g.drop("never offered")
    assert [r.item for r in g.take(1.0)] == ["b0"]
    g.offer("a", 16, deadline=1.0, item="a1", now=1.0)  # its next window, once taken
    assert [r.item for r in g.take(2.0)] == ["a1"]


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        Gatherer(max_batch=0, max_wait=0.001)
    with pytest.raises(ValueError):
        Gatherer(max_batch=1, max_wait=-1.0)
