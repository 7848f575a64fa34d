"""The real-time listener clock (pure: every time is given)."""

from __future__ import annotations

import pytest

from voicews.core.listener import ListenerClock


def test_plays_in_real_time_from_the_first_audio() -> None:
    clock = ListenerClock(1000)
    assert not clock.started and clock.played(5.0) == 0 and clock.left(5.0) == 0.0
    assert clock.add(500, 10.0) == 0.0  # half a second arrives at t=10: playing starts
    assert clock.add(500, 10.1) == 0.0  # more, while the first still plays
    assert clock.started and clock.received == 1000 and clock.end == pytest.approx(11.0)
    assert clock.played(10.0) == 0
    assert clock.played(10.25) == 250
    assert clock.left(10.25) == pytest.approx(0.75)
    assert clock.played(11.0) == 1000 and clock.played(99.0) == 1000


def test_waits_when_dry_and_says_how_long() -> None:
    clock = ListenerClock(1000)
    clock.add(100, 0.0)  # plays 0.0 - 0.1
    assert clock.played(0.5) == 100
    assert clock.add(100, 1.0) == pytest.approx(0.9)  # late: plays 1.0 - 1.1, not 0.1 - 0.2
    assert clock.played(1.05) == 150
    assert clock.end == pytest.approx(1.1)


def test_audio_arriving_just_in_time_is_no_wait() -> None:
    clock = ListenerClock(1000)
    clock.add(100, 0.0)
    assert clock.add(100, 0.1) == 0.0
    assert clock.add(100, 0.15) == 0.0 and clock.end == pytest.approx(0.3)
