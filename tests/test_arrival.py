"""The text rate a conversation's deltas arrive at (pure)."""

from __future__ import annotations

import math

import pytest

from voicews.core.arrival import MAX_GAP, PRIOR, Arrival


def test_a_steady_stream_is_measured_as_written_and_as_spoken() -> None:
    arrival = Arrival()
    for i in range(40):
        arrival.delta(" ab1", i * 0.2)  # 5 a second: 20 characters, 50 spoken (a digit is 7)
    assert arrival.rates.written == pytest.approx(20.0, rel=0.05)
    assert arrival.rates.spoken == pytest.approx(50.0, rel=0.05)


def test_before_any_interval_the_prior_holds_and_a_first_delta_only_starts_the_clock() -> None:
    arrival = Arrival()
    assert arrival.rates == PRIOR
    arrival.delta("a long first delta, written who knows when", 5.0)
    assert arrival.rates == PRIOR


def test_deltas_in_one_instant_add_without_dividing_by_nothing() -> None:
    arrival = Arrival()
    arrival.delta("a", 0.0)
    for _ in range(3):
        arrival.delta("word ", 0.5)
    assert arrival.rates.written > PRIOR.written * 0.3 / 0.8  # 15 more characters, no time


def test_the_pause_between_turns_and_a_long_one_within_count_little() -> None:
    arrival = Arrival()
    for i in range(20):
        arrival.delta("abcd", i * 0.05)  # 80 a second
    fast = arrival.rates.written
    arrival.turn_started()
    arrival.delta("abcd", 100.0)  # a minute later: a new turn, not a slow delta
    assert arrival.rates.written == fast
    arrival.delta("abcd", 110.0)  # ten seconds of a tool call count as MAX_GAP
    assert arrival.rates.written > 4 / (0.3 + 20 * 0.05 + MAX_GAP)


def test_the_rate_seen_is_the_deltas_alone() -> None:
    """Two deltas at 5 tokens a second: the prior still weighs in ``rates``, not in ``seen``."""
    arrival = Arrival()
    arrival.delta("Hmm,", 0.0)
    assert arrival.seen is None and not arrival.measured
    arrival.delta(" let", 0.2)
    assert arrival.seen is not None and arrival.seen.written == pytest.approx(20.0)
    assert arrival.rates.written > 35.0
    together = Arrival()
    together.delta("Hmm,", 0.0)
    together.delta(" let", 0.0)  # in one instant: as fast as can be
    assert together.seen is not None and together.seen.written == math.inf
