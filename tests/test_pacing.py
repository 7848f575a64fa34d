"""Urgency and cut lengths from the listener's audio left against the engine's cost (pure)."""

from __future__ import annotations

import random

import pytest

from voicews.core.cost import DEFAULT_PRIOR, Cost
from voicews.core.pacing import BUSY_JOB, FIRST_AUDIO, HORIZON, LEAD_CHARS, Load, Pacing, waits
from voicews.text.segmenter import Fit, Urgency

COST = Cost(fixed=0.1, per_char=0.005)


def paced(stall_guard_ms: int = 150, cost: Cost = COST, wait: float = 0.0) -> Pacing:
    pacing = Pacing(stall_guard_ms=stall_guard_ms, max_chars=100)
    pacing.engine(Load(cost=cost, wait=wait))
    return pacing


def test_guards_cover_the_pending_text_at_the_engines_cost_plus_the_margin() -> None:
    pacing = paced()
    assert pacing.guards(pending_chars=20, ahead=1.0) == pytest.approx((0.2 + 0.15, 0.2 + 0.05))
    fresh = Pacing(stall_guard_ms=0, max_chars=100)  # until the worker says: the default prior
    assert fresh.guards(40, 1.0)[0] == pytest.approx(DEFAULT_PRIOR.latency(40))


def test_urgency_rises_as_the_audio_left_falls() -> None:
    pacing = paced()
    clause, word = pacing.guards(pending_chars=40, ahead=1.0)
    assert pacing.urgency(clause + 0.01, 40) is Urgency.RELAXED
    assert pacing.urgency(clause, 40) is Urgency.URGENT
    assert pacing.urgency(word, 40) is Urgency.CRITICAL
    assert pacing.cut_times(10.0, 40, now=9.0) == pytest.approx([10.0 - clause, 10.0 - word])
    assert pacing.cut_times(None, 40, now=9.0) == []  # nothing played yet


def test_an_idle_worker_relaxes_into_clause_cuts_but_never_past_urgent() -> None:
    pacing = paced()
    clause, word = pacing.guards(pending_chars=40, ahead=1.0)
    pacing.engine(Load(cost=COST, wait=0.0, idle=True))
    assert pacing.urgency(clause + 0.01, 40) is Urgency.IDLE
    assert pacing.urgency(clause, 40) is Urgency.URGENT
    assert pacing.urgency(word, 40) is Urgency.CRITICAL
    slow = Cost(fixed=0.5, per_char=0.1)  # slower than real time: whole sentences still
    pacing.engine(Load(cost=slow, wait=0.0, idle=True))
    assert pacing.urgency(10.0, 40) is Urgency.RELAXED


def test_what_the_session_waits_beyond_the_cost_rises_at_once_and_decays_slowly() -> None:
    pacing = paced(stall_guard_ms=0)
    pacing.observe(seconds=1.0, chars=20)  # the engine takes 0.2 s: 0.8 s more, at once
    assert pacing.guards(20, 2.0)[0] == pytest.approx(1.0)
    pacing.observe(seconds=0.2, chars=20)  # as the engine costs: a tenth of the way down
    assert pacing.guards(20, 2.0)[0] == pytest.approx(0.2 + 0.72)
    # What the queue said it would wait is no lateness: it counts in the guards already.
    pacing = paced(stall_guard_ms=0)
    pacing.observe(seconds=1.0, chars=20, expected_wait=0.5)
    assert pacing.guards(20, 2.0)[0] == pytest.approx(0.2 + 0.3)


def test_a_timer_at_a_cut_time_finds_the_urgency_risen_despite_rounding() -> None:
    """The session sets a timer for ``cut_times``; at that moment the audio left is the guard
    give or take a rounding, which must not leave the cut waiting for the next text."""
    pacing = paced()
    end = 1.0761
    clause_at, word_at = pacing.cut_times(end, 21, now=0.5)
    assert pacing.urgency(end - clause_at + 1e-9, 21) is Urgency.URGENT
    assert pacing.urgency(end - word_at + 1e-9, 21) is Urgency.CRITICAL


def test_the_guards_count_the_queue_due_before_the_segment() -> None:
    """The job due first runs next: a segment due in a second waits for the compute of the
    segments due before it, not for those due after it, nor for what segments waited lately
    (sessions that counted the waits of segments due long after theirs all ran short at once
    in a burst, and asked together)."""
    calm = paced().guards(40, 1.0)
    queue = ((0.2, 0.1), (0.6, 0.15), (1.5, 0.4))  # due in 0.2, 0.6 and 1.5 s
    crowded = paced()
    crowded.engine(Load(cost=COST, wait=0.3, queue=queue))
    assert crowded.queue_wait(1.0) == pytest.approx(0.25)
    assert crowded.guards(40, 1.0) == pytest.approx((calm[0] + 0.25, calm[1] + 0.25))
    assert crowded.guards(40, 0.1) == pytest.approx(calm)  # due before them all
    assert crowded.cut_times(10.0, 40, now=9.0) == pytest.approx(
        [10.0 - calm[0] - 0.25, 10.0 - calm[1] - 0.25]
    )
    slow = Cost(fixed=0.3, per_char=0.03)
    crowded.engine(Load(cost=slow, wait=0.3, queue=queue))
    assert crowded.fit(1.05).most == paced(cost=slow).fit(0.8).most == 11  # less to fit


def test_a_crowded_worker_makes_first_segments_longer() -> None:
    assert paced().first_chars(speed=1.0) == 0  # nothing waits: first segments as eager as ever
    crowded = paced(wait=0.3)  # segments wait 300 ms for the worker lately
    # A first segment holds what is heard in 300 ms: about 15 characters a second at speed 1.
    assert (crowded.first_chars(speed=1.0), crowded.first_chars(speed=2.0)) == (4, 9)
    # Sessions starting together: nothing waited lately, but the queue holds 400 ms for a
    # first segment asked for now; the first segment holds more.
    starting = paced()
    starting.engine(Load(cost=COST, wait=0.0, backlog=0.4))
    assert starting.first_chars(speed=1.0) == 6
    assert starting.queue_wait(None) == pytest.approx(0.4)


def test_a_cut_fits_the_audio_left_and_gains_ground() -> None:
    pacing = paced(cost=Cost(fixed=0.3, per_char=0.03))
    # 1.05 s left, less the 0.15 s margin: 0.9 s, of which 0.3 fixed: 20 characters.
    # With a second left, the next word comes in time: no lone word (see below).
    # A second word may overrun it by 0.05 s of compute: one character (Piper's: 12).
    assert pacing.fit(1.05) == Fit(most=20, least=9, lone=False, slack=1)
    # Critical: two thirds of the margin, 0.95 s, of which 0.3 fixed: 21 characters.
    assert pacing.fit(1.05, critical=True) == Fit(most=21, least=9, lone=False, slack=1)
    assert paced(cost=Cost(fixed=0.05, per_char=0.004)).fit(1.0).slack == 12
    # Until heard, 15 characters a second (0.067 s each): 0.3 / (0.067 - 0.03) -> 9. A voice
    # heard slower (0.1 s a character) gains ground sooner; a queue wait costs like the fixed.
    pacing.heard(chars=100, seconds=20.0)  # an average of 0.2 s, weighted in by a fifth
    assert pacing.fit(1.05).least == 5
    assert pacing.fit(0.2).most == 0  # nothing fits


def test_an_engine_slower_than_real_time_keeps_whole_sentences() -> None:
    """Each character costs more than the audio it gives: no cut keeps the listener from
    running dry, and the fewest stalls come from the fewest pieces."""
    pacing = paced(cost=Cost(fixed=0.5, per_char=0.1))  # 0.1 s a character for ~0.067 heard
    assert pacing.urgency(0.0, 40) is Urgency.RELAXED
    assert pacing.cut_times(10.0, 40, now=9.0) == []


def streamed(pacing: Pacing, tokens_per_s: float, pieces: int, piece: str = " word") -> float:
    """Feed ``pieces`` deltas at ``tokens_per_s``, as a turn's first; returns the time after."""
    for i in range(pieces):
        pacing.arrived(piece, i / tokens_per_s, first=i == 0)
    return pieces / tokens_per_s


def test_the_lead_held_before_speaking_is_sized_from_the_text_rate() -> None:
    """At 20 tokens a second a first clause starts at once; at 5 the turn waits for about a
    phrase: cut as it comes, each word would be said on its own."""
    fast, slow = paced(), paced()
    streamed(fast, 20.0, 30, piece=" wor")  # 80 characters a second
    streamed(slow, 5.0, 30, piece=" wor")  # 20
    assert fast.start_lead() < 0.15
    assert 1.2 < slow.start_lead() < 2.0
    sure = 5  # "Sure,": 0.33 s of speech until heard
    assert not fast.holds_start(sure)
    assert slow.holds_start(sure) and slow.holds_start(18)
    assert not slow.holds_start(30)  # 2 s of speech


def test_text_slower_than_speech_adds_what_the_listener_would_lose() -> None:
    """Text that arrives slower than it is spoken runs the listener dry however it is cut:
    the lead grows by what it loses over ``HORIZON``."""
    pacing = paced()
    streamed(pacing, 5.0, 60, piece=" w")  # 10 characters a second; 15 are spoken until heard
    lead = pacing.start_lead()
    speech = 10 / 15  # seconds of speech arriving a second
    expected = LEAD_CHARS / 10 - FIRST_AUDIO * speech + HORIZON * (1 - speech)
    assert lead == pytest.approx(expected, rel=0.02)


def test_a_lone_word_waits_for_the_next_only_where_it_is_due_in_time() -> None:
    pacing = paced(cost=Cost(fixed=0.05, per_char=0.002))
    streamed(pacing, 10.0, 12)  # 50 characters a second: the next word in ~0.12 s
    assert not pacing.fit(0.2, critical=True).lone
    streamed(pacing, 2.0, 12)  # 10 a second: the next word in ~0.6 s
    assert pacing.fit(0.2, critical=True).lone


def test_calm_while_nothing_waits_for_the_worker() -> None:
    pacing = paced()
    assert pacing.calm
    pacing.engine(Load(cost=COST, wait=0.0, backlog=0.3))  # first segments asked for now would wait
    assert not pacing.calm
    pacing.engine(Load(cost=COST, wait=0.2))  # segments waited lately
    assert not pacing.calm


def test_a_critical_cut_may_split_a_phrase_only_while_others_wait_for_the_worker() -> None:
    pacing = paced()
    assert not pacing.fit(0.3, critical=True).split  # alone: a phrase is kept whole
    pacing.observe(0.5, 20)  # this session's own segment came late: still no one else waits
    assert not pacing.calm and not pacing.fit(0.3, critical=True).split
    pacing.engine(Load(cost=COST, wait=0.2))  # segments wait for the worker
    assert pacing.fit(0.3, critical=True).split


def test_a_busy_worker_caps_later_segments_at_what_it_computes_within_a_busy_job() -> None:
    piper = Cost(fixed=0.05, per_char=0.004)
    pacing = paced(cost=piper)
    assert pacing.busy_cap is None  # calm: segments as long as the text allows
    pacing.engine(Load(cost=piper, wait=0.2))
    assert pacing.busy_cap == piper.chars_within(BUSY_JOB) == 37
    slow = Cost(fixed=0.14, per_char=0.011)  # Kokoro's: a cap of a few characters is no phrase
    pacing.engine(Load(cost=slow, wait=0.2))
    assert pacing.busy_cap is None


def test_a_crowded_worker_caps_later_segments_however_calm_its_queue() -> None:
    piper = Cost(fixed=0.05, per_char=0.004)
    pacing = paced(cost=piper)
    pacing.engine(Load(cost=piper, wait=0.0, crowded=True))  # nothing waits, many listen
    assert pacing.calm and pacing.busy_cap == piper.chars_within(BUSY_JOB)
    pacing.engine(Load(cost=piper, wait=0.0))
    assert pacing.busy_cap is None


def test_the_next_words_wait_counts_what_of_it_is_in_hand_while_calm() -> None:
    """At 10 tokens a second "Your new | password | needs": "nee" was in hand, yet the wait for
    "needs" was counted as a whole word's, and "password" went alone. Busy, the whole word's
    wait still counts (waiting on it stalled more in a burst)."""
    engine = Cost(fixed=0.05, per_char=0.004)
    for wait, lone_with_partial in ((0.0, False), (0.2, True)):
        pacing = paced(cost=engine, wait=wait)
        for k in range(20):  # 4 characters every 0.1 s: 40 a second
            pacing.arrived("abcd", k / 10, first=k == 0)
        ahead = 0.05  # about to run dry
        assert pacing.fit(ahead, critical=True).lone  # a whole word's wait: too long
        assert pacing.fit(ahead, critical=True, partial=3).lone is lone_with_partial


def test_a_reading_answers_a_segments_wait_as_the_queue_sums_it() -> None:
    """``Load.waits`` (running sums, bisected: sessions ask it several times an event) gives
    what summing the queue gives, at every due time and between them, ties included."""
    rng = random.Random(4)
    dues = sorted(round(rng.uniform(-0.5, 3.0), 2) for _ in range(40))
    queue = tuple((at, rng.uniform(0.01, 0.3)) for at in dues)
    load = Load(0.0, DEFAULT_PRIOR, queue=queue)
    for due in [-1.0, *dues, *(at + 0.0005 for at in dues), *(at - 0.005 for at in dues), 9.0]:
        assert load.waits(due) == pytest.approx(waits(queue, due), abs=1e-12)
    assert Load(0.0, DEFAULT_PRIOR).waits(1.0) == 0.0
