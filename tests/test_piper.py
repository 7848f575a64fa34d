"""The Piper engine and its text front end (``engines/piper.py``, ``engines/piper_words.py``):
bounded inferences, text read as text, and what ``speed`` does."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from voicews.engines.base import SynthesisOptions, WordStarts
from voicews.engines.piper import (
    CONTEXT,
    FIRST_WINDOW,
    TAIL,
    PiperEngine,
    bundled_voice,
    sounding,
    split_at_decoder,
    windows,
    with_durations,
)
from voicews.engines.piper_int8 import FLOAT_ENV
from voicews.engines.piper_words import MAX_PHONEMES, inference_chunks, phonemize


@pytest.fixture(scope="module")
def engine() -> Iterator[PiperEngine]:
    yield PiperEngine()


@pytest.fixture(scope="module")
def quiet() -> Iterator[PiperEngine]:
    """The float decoder, the voice's noise off: the same audio every time, and the float
    decoder's exactness (int8 rounds an activation one way or the other as a float before it
    differs in its last bits, as on one thread and two: 45-84 dB from itself)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FLOAT_ENV, "1")
        engine = PiperEngine()
    engine._voice.config.noise_scale = engine._voice.config.noise_w_scale = 0.0
    yield engine


def test_short_sentences_are_one_inference_each() -> None:
    sentences = [list("hello"), list("there")]
    assert inference_chunks(sentences, 1.0) == sentences


def test_a_long_sentence_is_split_into_near_equal_pieces_at_breaks() -> None:
    words = ["words" + str(i % 10) for i in range(100)]  # 6 symbols a word, 701 in all
    sentence = list(" ".join(words[:50]) + ", " + " ".join(words[50:]))
    chunks = inference_chunks([sentence], 1.0)
    assert len(chunks) == 4 and all(len(c) <= MAX_PHONEMES for c in chunks)
    assert max(map(len, chunks)) - min(map(len, chunks)) < 20
    assert all(c[0] != " " and c[-1] != " " for c in chunks)  # cut at word breaks
    assert "".join(" ".join("".join(c) for c in chunks).split()) == "".join(
        "".join(sentence).split()
    )


def test_slower_speech_gets_proportionally_fewer_phonemes_per_inference() -> None:
    sentence = list("a" * 400)  # no break anywhere: hard cuts
    assert [len(c) for c in inference_chunks([sentence], 0.5)] == [100] * 4
    assert [len(c) for c in inference_chunks([sentence], 2.0)] == [200] * 2


def test_phoneme_markup_is_read_as_text() -> None:
    """piper-tts takes ``[[...]]`` as raw phonemes; voicews speaks what the text says."""
    from piper import PiperVoice
    from piper.config import PiperConfig

    model = bundled_voice()
    config = json.loads(model.with_name(model.name + ".json").read_text(encoding="utf-8"))
    voice = PiperVoice(session=None, config=PiperConfig.from_dict(config))  # type: ignore[arg-type]
    marked = phonemize(voice, "[[h@l'oU]]")
    assert marked != [list("h@l'oU")]
    assert marked == phonemize(voice, "[ [h@l'oU]]")


def audio_chunks(engine: PiperEngine, text: str, speed: float = 1.0) -> list[float]:
    """Seconds of audio in each chunk the engine yields."""
    return [
        len(item) / engine.sample_rate
        for item in engine.synthesize(text, SynthesisOptions(speed=speed))
        if isinstance(item, np.ndarray)
    ]


@pytest.mark.parametrize(("text", "speed"), [("你好" * 15, 1.0), ("你好" * 8, 0.5)])
def test_text_that_expands_is_synthesized_in_bounded_inferences(
    engine: PiperEngine, text: str, speed: float
) -> None:
    """30 CJK characters, which this English voice spells out as 20 s of speech: one
    inference before; now pieces of at most ~10 s (the memory one inference takes, and how
    long the compute worker goes between chances to switch jobs)."""
    chunks = audio_chunks(engine, text, speed)
    print(f"{len(text)} characters at speed {speed}: inferences of {chunks} s")
    assert sum(chunks) > 18 and len(chunks) >= 2
    assert max(chunks) < 13


def test_speed_divides_each_phonemes_duration() -> None:
    """What ``speed`` means (README, PROTOCOL.md): Piper's length scale, divided by it. Each
    phoneme and the pause after it is rounded up to whole frames (11.6 ms, at least one), so
    the length changes by less than the factor at both ends: 0.25 gives 3.48 times the
    duration, 0.5 1.76 times, 2.0 0.62 times, 4.0 0.48 times. The voice's noise is off, so the
    durations are the same each run (with it, 0.5 gave 1.69-1.8 times)."""
    engine = PiperEngine()
    engine._voice.config.noise_scale = engine._voice.config.noise_w_scale = 0.0
    text = "Sure, I can help with that. Your order shipped on Monday and should arrive soon."
    speeds = (0.25, 0.5, 1.0, 2.0, 4.0)
    seconds = {speed: sum(audio_chunks(engine, text, speed)) for speed in speeds}
    ratio = {speed: seconds[speed] / seconds[1.0] for speed in speeds}
    print(", ".join(f"speed {speed}: {ratio[speed]:.2f}x the duration" for speed in speeds))
    assert 3.3 < ratio[0.25] < 3.7 and 1.7 < ratio[0.5] < 1.85
    assert 0.58 < ratio[2.0] < 0.67 and 0.44 < ratio[4.0] < 0.52
    assert seconds == {speed: sum(audio_chunks(engine, text, speed)) for speed in speeds}


def test_a_sentence_is_decoded_whole_unless_a_listener_waits_on_a_long_enough_one() -> None:
    assert windows(100, eager=False) == [(0, 100)]
    assert windows(100, eager=True) == [(0, FIRST_WINDOW), (FIRST_WINDOW, 100)]
    assert windows(2 * FIRST_WINDOW - 1, eager=True) == [(0, 2 * FIRST_WINDOW - 1)]


def test_the_voice_is_cut_at_its_generators_one_input() -> None:
    import onnx

    split = split_at_decoder(with_durations(bundled_voice()))
    assert split is not None
    front, decoder = (onnx.load(str(path), load_external_data=False).graph for path in split)
    assert [o.name for o in front.output][1:] == ["/Ceil_output_0"]  # the durations stay
    assert [i.name for i in decoder.input] == [front.output[0].name]
    assert {n.name.split("/")[1] for n in decoder.node} <= {"dec", "Unsqueeze_11"}
    assert split_at_decoder(with_durations(bundled_voice())) == split  # made once


@pytest.mark.parametrize(("decoder", "least_db"), [("float", 90), ("int8", 35)])
def test_windows_decoded_with_context_give_the_whole_sentences_audio(
    engine: PiperEngine, quiet: PiperEngine, decoder: str, least_db: float
) -> None:
    """The same waveform on the float decoder; on int8, as close as int8 is to itself."""
    ids = quiet._voice.phonemes_to_ids(phonemize(quiet._voice, "Good question, let me see.")[0])
    latents, _ = quiet._voice.phoneme_ids_to_audio(ids, include_alignments=True)
    latents = latents[np.newaxis]
    frames = latents.shape[2]
    assert frames > 2 * FIRST_WINDOW + 2 * CONTEXT
    used = quiet if decoder == "float" else engine
    whole = used.decode(latents, (0, frames))
    assert len(whole) == frames * 256
    parts = [used.decode(latents, window) for window in windows(frames, eager=True)]
    assert [len(p) for p in parts] == [FIRST_WINDOW * 256, (frames - FIRST_WINDOW) * 256]
    error = np.concatenate(parts) - whole
    assert 10 * np.log10(np.sum(whole**2) / np.sum(error**2)) > least_db  # dB


def test_an_eager_segment_gives_its_first_window_first(engine: PiperEngine) -> None:
    text = "I have booked you with the doctor. It is at ten."
    eager = [x for x in engine.synthesize(text, SynthesisOptions(eager=True))]
    plain = [x for x in engine.synthesize(text, SynthesisOptions())]
    assert len(eager[0]) == FIRST_WINDOW * 256
    # The words just before the last chunk: the chunk ends the synthesis (see ComputeWorker).
    assert [type(x).__name__ for x in eager] == ["ndarray"] * 2 + ["WordStarts", "ndarray"]
    assert [type(x).__name__ for x in plain] == ["ndarray", "WordStarts", "ndarray"]


def test_only_frames_up_to_the_last_sounding_phoneme_and_a_tail_are_decoded() -> None:
    samples = np.array([3, 2, 4, 5, 7]) * 256
    assert sounding(samples, np.array([True, False, False, True, True]), 256) == 9 + TAIL
    assert sounding(samples, np.array([True, False, False, False, True]), 256) == 14 + TAIL
    assert sounding(samples, np.array([True, False, False, False, False]), 256) == 21  # all
    assert sounding(samples, np.array([True] * 5), 256) == 21  # nothing sounds: all of it


@pytest.mark.parametrize("text", ["I have", "Sure,", "Okay", "Good question.", "Absolutely,"])
def test_the_silence_after_the_last_phoneme_is_zeros_and_what_is_heard_the_whole_decode(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stitcher keeps at most a 260 ms pause after a segment's last loud sample (40 ms at a
    word break): up to there, the audio is the voice's whole decode; after the tail, zeros of
    the same length. Noise off: the latents are the same each time. On the float decoder: the
    int8 one's last sample over 0.01 may come a few ms later (Sure,: 3.7 ms), and the 40 ms
    after it then reach into the fade (32 dB)."""
    monkeypatch.setenv(FLOAT_ENV, "1")
    engine = PiperEngine()
    engine._voice.config.noise_scale = engine._voice.config.noise_w_scale = 0.0
    ids = engine._voice.phonemes_to_ids(phonemize(engine._voice, text)[0])
    latents, _ = engine._voice.phoneme_ids_to_audio(ids, include_alignments=True)
    whole = engine.decode(latents[np.newaxis], (0, latents.shape[1]))
    audio = np.concatenate(
        [x for x in engine.synthesize(text, SynthesisOptions()) if isinstance(x, np.ndarray)]
    )
    assert audio.shape == whole.shape
    zeros = np.flatnonzero(audio == 0.0)
    assert zeros.size > 4 * 256 and not audio[zeros[0] :].any()  # frames not decoded
    loud = np.flatnonzero(np.abs(whole) > 0.01)
    heard = slice(0, loud[-1] + int(0.04 * engine.sample_rate))
    error = audio[heard] - whole[heard]
    assert 10 * np.log10(np.sum(whole[heard] ** 2) / np.sum(error**2)) > 35  # dB
    print(f"{text!r}: {zeros.size / 256:.0f} of {whole.size / 256:.0f} frames not decoded")


def _said(engine: PiperEngine, text: str, then: str = "") -> tuple[np.ndarray, tuple[int, ...]]:
    out = list(engine.synthesize(text, SynthesisOptions(then=then)))
    marks = [x.samples for x in out if isinstance(x, WordStarts)]
    return np.concatenate([x for x in out if not isinstance(x, WordStarts)]), marks[0]


def _again(engine: PiperEngine, text: str, then: str = "") -> list[np.ndarray]:
    return [_said(engine, text, then)[0] for _ in range(2)]


def _slope(audio: np.ndarray, sample_rate: int) -> float:
    """Least-squares F0 slope (semitones a second) over the last 300 ms of sound."""
    import parselmouth

    loud = np.flatnonzero(np.abs(audio) > 0.01 * np.abs(audio).max())
    end = audio[: loud[-1] + 1][-round(0.5 * sample_rate) :].astype(np.float64)
    sound = parselmouth.Sound(end, sampling_frequency=sample_rate)
    pitch = sound.to_pitch_ac(time_step=0.01, pitch_floor=60.0, pitch_ceiling=400.0)
    f0, times = pitch.selected_array["frequency"], pitch.xs()
    kept = (f0 > 0) & (times >= end.size / sample_rate - 0.3)
    return float(np.polyfit(times[kept], 12 * np.log2(f0[kept] / 100), 1)[0])


def test_a_segment_cut_mid_sentence_ends_as_its_sentence_goes_on() -> None:
    """Said alone, "at a quarter" ends as a statement does, pitch falling; said with the next
    word, cut off where that word starts, it ends as the sentence goes on (measured over 26
    pieces of the bench's replies: 50% of ends falling alone, 12% so). Piper's noise is drawn
    from a fixed seed, so the test hears the same audio every run: over seeds 1-6 the worst
    cut missed by 35-104 ms, their median 12-41 ms, and the median slope rose 6.6-18.8
    semitones a second with the next word said (it failed runs now and then unseeded). With
    the flow in int8 the draws differ, within the same ranges (seeds 1-6: 58-104 ms worst,
    12-41 ms median; seed 1's median 41 ms)."""
    import onnxruntime

    onnxruntime.set_seed(1)  # the sessions made after it draw the same noise each run
    engine = PiperEngine()
    pieces = [
        ("I have booked", "you"), ("The next train", "to"), ("at a quarter", "past"),
        ("and it takes", "about"), ("That recipe needs", "two"), ("I checked your", "account"),
        ("Your package is", "at"), ("The driver should", "bring"), ("I found three", "hotels"),
        ("The cheapest one", "has"),
    ]  # fmt: skip
    alone, ahead, misses = [], [], []
    for text, then in pieces:
        audio, marks = _said(engine, text)
        cut, cut_marks = _said(engine, text, then)
        _, whole_marks = _said(engine, f"{text} {then}")
        assert len(cut_marks) == len(marks) == 3 and len(whole_marks) == 4
        misses.append(abs(cut.size - whole_marks[3]) / engine.sample_rate)
        # Each end's slope as a mean over three syntheses: one draw of Piper's noise is loud.
        alone.append(
            np.mean([_slope(a, engine.sample_rate) for a in (audio, *_again(engine, text))])
        )
        ahead.append(
            np.mean([_slope(a, engine.sample_rate) for a in (cut, *_again(engine, text, then))])
        )
    # The next word is not heard: the audio ends about where it starts in the whole. Two
    # syntheses draw their durations' noise apart: over 50 such cuts the miss was 12 ms at the
    # median and 81 ms at worst (93 ms in a CI run), so one cut is bounded by what the noise
    # allows (well under a word), their median to what the seeds above gave.
    assert max(misses) < 0.15 and np.median(misses) < 0.05, misses
    # Less falling with the next word said: the median difference drawn 8 times with this
    # averaging ranged 2.2 to 20.2 semitones a second (and 4.5 twice at one synthesis each), so
    # its direction is what the noise lets a test hold to, not the 5 it once asserted.
    assert np.median(ahead) > np.median(alone)
