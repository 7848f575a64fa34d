"""The continuity bench's measures (``bench/listening``): pure, on known inputs, so its figures
can be trusted: the silence heard, phrasing, where segments end, and pitch contours."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.harness.connections import Turn
from bench.listening.endings import Reference, end_pairs
from bench.listening.figures import (
    EndPair,
    Intonation,
    Listening,
    heard_stall_ms,
    segment_margins_ms,
)
from bench.listening.phrasing import (
    char_deltas,
    median_words,
    one_word_mid,
    sentence_ends,
    split_phrases,
    units,
)
from bench.listening.pitch import (
    FALL_ST,
    LOW_ST,
    Contour,
    contour,
    end_contour,
    falls,
    semitones,
    speech_end,
    whole_boundary,
)

RATE = 1000  # samples per second: a sample is a millisecond


def turn(arrivals: list[tuple[float, int]], segments: list[str] | None = None) -> Turn:
    """A finished turn whose audio arrived as (seconds from the first delta, samples)."""
    out = Turn("s", "test", 20.0, 0, sample_rate=RATE, first_delta_at=0.0, done_at=9.0)
    out.segments = segments or ["one"]
    out.finish([t for t, _ in arrivals], [n for _, n in arrivals], 0.0)
    return out


# --- the silence heard --------------------------------------------------------------------------


def test_every_gap_after_the_first_audio_counts() -> None:
    # 200 ms at 0.1 s plays to 0.3; the next at 0.35 (50 ms late) plays to 0.45; then 0.5.
    heard = turn([(0.1, 200), (0.35, 100), (0.5, 100)])
    assert heard.ttfa_ms == pytest.approx(100)
    assert heard_stall_ms(heard) == pytest.approx(50 + 50)


def test_audio_in_hand_is_no_stall() -> None:
    assert heard_stall_ms(turn([(0.0, 500), (0.2, 500), (0.9, 100)])) == 0.0


def test_a_client_buffer_hides_gaps_shorter_than_itself() -> None:
    late = turn([(0.0, 100), (0.15, 100), (0.3, 100)])  # each 50 ms late without a buffer
    assert heard_stall_ms(late) == pytest.approx(100)
    # Playing from 0.15 with 200 ms in hand, then 100 ms more at 0.3: never dry.
    assert heard_stall_ms(late, buffer_s=0.15) == 0.0


def test_a_reply_pooled_with_others() -> None:
    smooth = turn([(0.1, 1000)], ["Hmm,", "let me check", "that", "for you."])
    gappy = turn([(0.3, 100), (0.6, 100)], ["One two", "three", "four five six"])
    s = Listening.of([smooth, gappy], buffer_s=0.15)
    assert (s.replies, s.failed) == (2, 0)
    assert s.ttfa_p50_ms == pytest.approx(200)
    assert (s.stall_med_ms, s.stall_worst_ms) == pytest.approx((100, 200))
    assert s.stalled == 1  # over 100 ms: only the 200
    assert s.buffered_worst_ms == 0.0  # 150 ms in hand: the gappy one starts at 0.6, whole
    assert (s.one_word_mid, s.mid_segments) == (2, 3)  # "that", "three"; first, last exempt
    assert s.one_word_share == pytest.approx(2 / 3)
    assert s.words_per_segment == 2  # 1, 3, 1, 2 and 2, 1, 3
    # "that | for you" (heard as leading on, as in "that the"), "two | three", "three | four".
    assert (s.split_phrases, s.cuts) == (3, 5)


def test_a_segment_margin_is_the_audio_left_when_it_began_to_arrive() -> None:
    # Segments start at samples 0, 300 (mid-frame: with the frame at 0.15, 50 ms before the
    # audio ran out at 0.2) and 400 (at 0.4: the audio ran out at 0.35, 50 ms of silence).
    heard = turn([(0.0, 200), (0.15, 150), (0.4, 100)], ["a", "b", "c"])
    heard.segment_starts = [0, 300, 400]
    assert segment_margins_ms(heard) == pytest.approx([50.0, -50.0])


# --- phrasing -----------------------------------------------------------------------------------


def test_deltas_of_four_characters_cut_anywhere() -> None:
    assert char_deltas("It is $4.20 now") == ["It i", "s $4", ".20 ", "now"]
    assert "".join(char_deltas("x" * 9)) == "x" * 9


def test_first_and_last_segments_are_exempt_from_one_word() -> None:
    assert one_word_mid(["Hmm,", "sure", "okay."]) == (1, 1)
    assert one_word_mid(["Hmm,", "okay."]) == (0, 0)
    assert math.isnan(median_words([]))


def test_a_cut_after_a_word_that_leads_into_the_next_splits_a_phrase() -> None:
    # "near | the beach" and "twelve | dollars" split; "hotels", a clause end and the reply's
    # end do not.
    segments = ["I found hotels", "near", "the beach,", "from twelve", "dollars a night"]
    assert split_phrases(segments) == (2, 4)
    assert split_phrases(["The driver should", "bring it."]) == (1, 1)
    assert split_phrases(["Only one."]) == (0, 0)


def test_segments_are_placed_on_the_sentences_they_spell() -> None:
    sentences = ["Good question.", "The total is $5, with tax."]
    segments = ["Good", "question. The", "total is $5,", "with tax."]
    assert sentence_ends(sentences, segments) == [False, False, False, True]
    whole = ["Good question.", "The total is $5, with tax."]
    assert sentence_ends(sentences, whole) == [True, True]
    assert sentence_ends(sentences, ["Good question.", "The total"]) is None  # not the reply


def test_units_run_from_one_sentence_end_to_the_next() -> None:
    grouped = units([False, True, False, False, True, False])
    assert [list(u.segments) for u in grouped] == [[0, 1], [2, 3, 4], [5]]
    assert grouped[1].ends == (False, False, True)


# --- pitch --------------------------------------------------------------------------------------


def test_a_falling_contour_is_told_from_a_level_one() -> None:
    times = np.arange(30) * 0.01
    falling = contour(times, 120.0 * 2 ** (-times * 20 / 12))  # down 20 st per second
    assert falling is not None and falls(falling, key=falling.end_st + 4)
    assert falling.slope_st_s == pytest.approx(-20, abs=0.1)
    assert falling.drop_st == pytest.approx(-20 * 0.2, abs=0.1)  # thirds' means 0.2 s apart
    level = contour(times, np.full(30, 120.0))
    assert level is not None and level.drop_st == pytest.approx(0)
    assert not falls(level, key=level.end_st + 4)
    assert level.end_st == pytest.approx(float(semitones(np.array([120.0]))[0]))


def test_unvoiced_frames_and_octave_slips_are_left_out() -> None:
    times = np.arange(20) * 0.01
    f0 = np.full(20, 100.0)
    f0[[3, 4, 5]] = np.nan
    f0[[10, 15]] = 200.0  # an octave up: the tracker, not the voice
    flat = contour(times, f0)
    assert flat is not None and flat.voiced == 15 and flat.slope_st_s == pytest.approx(0)
    assert contour(times, np.full(20, np.nan)) is None


def test_falling_drops_and_ends_low_in_the_sentence() -> None:
    low = Contour(-10.0, -FALL_ST, -LOW_ST, 10)
    assert falls(low, key=0.0)
    assert not falls(low, key=-0.1)  # a drop that ends near the sentence's median: it goes on
    assert not falls(Contour(-10.0, -FALL_ST + 0.1, -9.0, 10), key=0.0)  # low, but level


def test_a_segment_end_is_its_last_sound() -> None:
    audio = np.zeros(2000, np.float32)
    audio[:1200] = 0.5 * np.sin(np.arange(1200) * 0.3)
    assert speech_end(audio, 2000, RATE) == 1200
    assert speech_end(audio, 800, RATE) == 800  # sound up to the end asked for


def test_the_same_words_in_the_whole_end_where_the_next_word_starts() -> None:
    marks = (0, 300, 700)
    assert whole_boundary(marks, 2, 0.5, 1000) == (700, True)
    assert whole_boundary(marks, 3, 1.0, 1000) == (1000, True)  # the sentence's last word
    assert whole_boundary(None, 2, 0.25, 1000) == (250, False)  # no marks: by characters


@pytest.mark.parametrize("glide_st", [-8.0, 0.0, 6.0])
def test_praat_reads_a_known_glide(glide_st: float) -> None:
    """A harmonic tone gliding ``glide_st`` over its last 0.5 s: the contour says so."""
    rate = 22050
    t = np.arange(int(0.8 * rate)) / rate
    hz = 120.0 * 2 ** (glide_st * np.clip(t - 0.3, 0, None) / 0.5 / 12)
    phase = 2 * np.pi * np.cumsum(hz) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 6)).astype(np.float32) * 0.3
    measured = end_contour(tone, tone.size, rate)
    assert measured is not None and measured.voiced >= 20
    assert measured.slope_st_s == pytest.approx(glide_st / 0.5, abs=1.5)
    assert falls(measured, key=float(semitones(np.array([120.0]))[0])) == (glide_st < 0)


def test_ends_pooled_streamed_beside_whole() -> None:
    fall, flat = Contour(-20.0, -4.0, -6.0, 20), Contour(0.0, 0.0, 0.0, 20)
    pairs = [
        EndPair("v", 5.0, False, fall, flat, True, 0.0),
        EndPair("v", 5.0, False, fall, fall, True, 0.0),
        EndPair("v", 5.0, False, None, flat, False, 0.0),  # too little voiced: not measured
    ]
    s = Intonation.of(pairs)
    assert (s.ends, s.measured, s.by_marks) == (3, 2, 2)
    assert (s.falling_streamed, s.falling_whole) == (2, 1)
    assert s.drop_streamed == pytest.approx(-4.0) and s.drop_whole == pytest.approx(-2.0)
    assert s.level_streamed == pytest.approx(-6.0) and s.level_whole == pytest.approx(-3.0)
    s = Intonation.of([*pairs, EndPair("v", 5.0, False, fall, flat, True, 0.0)])
    assert s.drop_streamed == pytest.approx(-4.0) and s.drop_whole == pytest.approx(0.0)  # medians


@pytest.mark.slow
def test_ends_of_a_real_reply_are_placed_and_measured() -> None:
    """Piper speaks a sentence in two segments, as a server streams it: the first end is
    mid-sentence, the second final, each beside the same words in the whole sentence."""
    reference = Reference()
    parts = ["Your table is ready,", "and the kitchen closes at ten."]
    audio = [reference.whole(part)[0] for part in parts]
    streamed = Turn("v", "test", 5.0, 0, sample_rate=reference.sample_rate)
    streamed.segments = streamed.segment_spoken = parts
    streamed.segment_starts = [0, audio[0].size]
    streamed.pcm = (np.concatenate(audio) * 32767).astype("<i2").tobytes()
    pairs = end_pairs(streamed, [" ".join(parts)], reference)
    assert [p.sentence_final for p in pairs] == [False, True]
    assert all(p.by_marks and p.streamed and p.whole for p in pairs)
    assert len({p.key_st for p in pairs}) == 1 and not math.isnan(pairs[0].key_st)
    assert end_pairs(streamed, ["Something else entirely."], reference) == []
