"""Urgency from the listener's audio left against the synthesis latency seen (pure)."""

from __future__ import annotations

import pytest

from voicews.pacing import Pacing
from voicews.segmenter import Urgency


def test_guards_cover_the_pending_text_at_the_latency_seen_plus_the_margin() -> None:
    pacing = Pacing(stall_guard_ms=150, max_chars=100)
    # Until measured: 5 ms per character, short texts counted as 20 characters.
    assert pacing.guards(pending_chars=5) == pytest.approx((0.1 + 0.15, 0.1 + 0.05))
    assert pacing.guards(pending_chars=60) == pytest.approx((0.3 + 0.15, 0.3 + 0.05))
    assert pacing.guards(pending_chars=1000) == pacing.guards(pending_chars=100)  # one segment


def test_urgency_rises_as_the_audio_left_falls() -> None:
    pacing = Pacing(stall_guard_ms=150, max_chars=100)
    clause, word = pacing.guards(pending_chars=40)
    assert pacing.urgency(clause + 0.01, 40) is Urgency.RELAXED
    assert pacing.urgency(clause, 40) is Urgency.URGENT
    assert pacing.urgency(word, 40) is Urgency.CRITICAL
    assert pacing.cut_times(10.0, 40) == pytest.approx([10.0 - clause, 10.0 - word])
    assert pacing.cut_times(None, 40) == []  # nothing played yet


def test_latency_rises_at_once_and_decays_slowly() -> None:
    pacing = Pacing(stall_guard_ms=0, max_chars=100)
    pacing.observe(seconds=1.0, chars=50)  # 20 ms per character: slower, taken at once
    assert pacing.guards(50)[0] == pytest.approx(1.0)
    pacing.observe(seconds=0.0, chars=50)  # much faster: a tenth of the way down
    assert pacing.guards(50)[0] == pytest.approx(0.9)
    pacing.observe(seconds=0.5, chars=5)  # a short text counts as 20 characters
    assert pacing.guards(20)[0] == pytest.approx(0.5)


def test_a_timer_at_a_cut_time_finds_the_urgency_risen_despite_rounding() -> None:
    """The session sets a timer for ``cut_times``; at that moment the audio left is the guard
    give or take a rounding, which must not leave the cut waiting for the next text."""
    pacing = Pacing(stall_guard_ms=150, max_chars=100)
    end = 1.0761
    clause_at, word_at = pacing.cut_times(end, 21)
    assert pacing.urgency(end - clause_at + 1e-9, 21) is Urgency.URGENT
    assert pacing.urgency(end - word_at + 1e-9, 21) is Urgency.CRITICAL


def test_a_crowded_worker_keeps_its_wait_more_in_hand() -> None:
    pacing = Pacing(stall_guard_ms=150, max_chars=100)
    calm = pacing.guards(40)
    assert pacing.first_chars(speed=1.0) == 0  # nothing waits: first segments as eager as ever
    pacing.crowded(0.3)  # segments wait 300 ms for the worker lately
    assert pacing.guards(40) == pytest.approx((calm[0] + 0.3, calm[1] + 0.3))
    # A first segment holds what is heard in 300 ms: about 15 characters a second at speed 1.
    assert (pacing.first_chars(speed=1.0), pacing.first_chars(speed=2.0)) == (4, 9)
    pacing.crowded(0.0)
    assert pacing.guards(40) == pytest.approx(calm)
