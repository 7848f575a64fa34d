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
