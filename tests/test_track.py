"""A turn's outgoing audio: segments announced at their start, frames numbered, words placed."""

from __future__ import annotations

import numpy as np

from voicews.audio import StitchConfig
from voicews.core.events import AudioFrame, Outgoing, SegmentStarted, WordMark, Words
from voicews.core.track import Track
from voicews.encoding import FrameEncoder, OutputFormat
from voicews.text.segmenter import Boundary

RATE = 1000
LEAD = 15  # StitchConfig.lead_ms at 1 kHz


def tone(samples: int, silence: int = 0) -> np.ndarray:
    audio = np.full(silence + samples, 0.5, dtype=np.float32)
    audio[:silence] = 0.0
    return audio


def make(out_rate: int = RATE) -> Track:
    """A track of an engine at ``RATE``, framed in 40 ms PCM16 frames at ``out_rate``."""
    return Track("t", RATE, FrameEncoder(RATE, OutputFormat(out_rate), 40), StitchConfig())


def frames(items: list[Outgoing]) -> list[AudioFrame]:
    return [i for i in items if isinstance(i, AudioFrame)]


def test_a_segment_is_announced_with_its_first_audio_then_framed_in_order() -> None:
    track = make()
    track.begin("Hello there,")
    assert track.push(tone(0, silence=300)) == []  # silence only: nothing to say yet
    out = track.push(tone(500))
    assert out[0] == SegmentStarted(turn_id="t", text="Hello there,", start_sample=0)
    out += track.end(Boundary.CLAUSE)
    track.begin("how are you?")
    second = track.push(tone(400, silence=50))
    second += track.end(Boundary.SENTENCE)
    out += second + track.finish()
    sent = frames(out)
    assert [f.seq for f in sent] == list(range(len(sent)))
    assert [f.start_sample for f in sent] == [
        sum(f.samples for f in sent[:i]) for i in range(len(sent))
    ]
    assert all(0 < f.samples <= 40 for f in sent) and track.samples == sum(f.samples for f in sent)
    (announced,) = [i for i in second if isinstance(i, SegmentStarted)]
    assert announced.start_sample == track.spoken[1][0] > 500
    assert [text for _, text in track.spoken] == ["Hello there,", "how are you?"]


def test_words_are_placed_from_the_segments_start_after_the_trimmed_lead() -> None:
    track = make()
    track.begin("One.")
    track.push(tone(200))
    track.end(Boundary.SENTENCE)
    start = track.samples
    track.begin("two words")
    assert track.place_words([0, 10]) is None  # not announced yet: nothing to place against
    track.push(tone(300, silence=500))  # 500 samples of silence from the engine: LEAD kept
    base = track.spoken[-1][0]
    assert base == start
    skipped = 500 - LEAD
    placed = track.place_words([skipped + 5, skipped + 165])
    assert placed == Words(
        turn_id="t",
        words=[
            WordMark(text="two", start_sample=base + 5),
            WordMark(text="words", start_sample=base + 165),
        ],
    )
    assert track.spoken[-2:] == [(base + 5, "two"), (base + 165, "words")]


def test_a_miscounted_placement_leaves_the_segment_whole() -> None:
    track = make()
    track.begin("two words")
    track.push(tone(300))
    assert track.place_words([0, 100, 200]) is None
    assert track.spoken == [(0, "two words")]


def test_what_was_heard_ends_at_the_last_unit_that_had_started() -> None:
    track = make()
    track.spoken = [(0, "Hello"), (300, "there,"), (700, "friend.")]
    assert track.heard(0) == ""
    assert track.heard(301) == "Hello there,"
    assert track.heard(10**6) == "Hello there, friend."


def test_the_tail_after_a_failed_segment_is_not_announced_as_it() -> None:
    track = make()
    track.begin("Spoken.")
    track.push(tone(200))
    track.end(Boundary.SENTENCE)
    track.begin("Failed before any audio.")
    tail = track.finish()  # the previous segment's faded tail
    assert tail and all(isinstance(i, AudioFrame) for i in tail)
    assert [text for _, text in track.spoken] == ["Spoken."]


def test_at_another_output_rate_positions_are_at_that_rate_and_kept_at_the_engines() -> None:
    track = make(out_rate=2 * RATE)
    track.begin("One.")
    out = track.push(tone(200))
    out += track.end(Boundary.SENTENCE)
    track.begin("two words")
    out += track.push(tone(300))
    engine_start = track.spoken[-1][0]
    (_, announced) = [i for i in out if isinstance(i, SegmentStarted)]
    assert announced.start_sample == 2 * engine_start
    placed = track.place_words([0, 100])
    assert placed is not None
    assert [w.start_sample for w in placed.words] == [2 * engine_start, 2 * (engine_start + 100)]
    assert track.spoken[-2:] == [(engine_start, "two"), (engine_start + 100, "words")]
    assert track.heard(2 * (engine_start + 100)) == "One. two"
    out += track.end(Boundary.SENTENCE) + track.finish()
    sent = frames(out)
    assert all(0 < f.samples <= 80 for f in sent)  # 40 ms at the output rate
    assert [f.start_sample for f in sent] == [
        sum(f.samples for f in sent[:i]) for i in range(len(sent))
    ]
    assert track.samples == 2 * (engine_start + 300)  # the resampler flushed at the end
