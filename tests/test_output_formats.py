"""Output formats end to end: a real server, real websockets clients, the real voice, frames at
the session's rate and in its encoding, positions and heard text counted at that rate."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus

from conftest import timeout
from voicews.client import RealtimeClient, SpokenTurn
from voicews.encoding import OPUS_FRAME
from voicews.engines import BUNDLED_VOICE
from voicews.errors import ErrorCode
from voicews.protocol import (
    AudioFormat,
    AudioFrame,
    AudioUpdate,
    Error,
    SessionUpdated,
    TurnStarted,
    Words,
)
from voicews.server import VoicewsServer

REPLY = (
    "Sure, I can help with that. The forecast for tomorrow is sunny, with a high of 24 "
    "degrees and a light breeze."
)
BYTES_PER_SAMPLE = {"pcm_s16le": 2, "pcm_f32le": 4, "pcm_mulaw": 1, "pcm_alaw": 1}
OPUS_DELAY = 312  # libopus's lookahead at 48 kHz: where a turn's audio starts in the packets


def url(server: VoicewsServer, rate: int, fmt: str) -> str:
    return f"{server.url}?sample_rate={rate}&format={fmt}"


def assert_framed(turn: SpokenTurn, rate: int, fmt: str) -> None:
    """Contiguous frames of the right size and encoding; turn_done counts exactly what came."""
    assert turn.done is not None and not turn.done.cancelled and not turn.errors
    position = 0
    for seq, frame in enumerate(turn.frames):
        assert (frame.seq, frame.start_sample) == (seq, position)
        if fmt == "opus":
            assert frame.samples == OPUS_FRAME
        else:
            assert 0 < frame.samples <= rate * 40 // 1000
            assert len(frame.pcm) == frame.samples * BYTES_PER_SAMPLE[fmt]
        position += frame.samples
    assert turn.done.samples == turn.samples == position == turn.audio().size


@pytest.mark.parametrize(
    ("rate", "fmt"),
    [
        (8000, "pcm_mulaw"),
        (8000, "pcm_alaw"),
        (16000, "pcm_s16le"),
        (24000, "pcm_f32le"),
        (44100, "pcm_s16le"),
        (48000, "pcm_s16le"),
        (48000, "opus"),
    ],
)
async def test_a_turn_in_each_format(server: VoicewsServer, rate: int, fmt: str) -> None:
    async with await RealtimeClient.connect(url(server, rate, fmt)) as client:
        assert client.created.audio == AudioFormat(sample_rate=rate, format=fmt)  # type: ignore[arg-type]
        turn = await client.speak(REPLY, timeout=timeout(30))
    assert_framed(turn, rate, fmt)
    assert 5.0 < turn.duration < 12.0  # the voice's ~7.5 s, at any rate
    audio = turn.audio()
    assert 0.2 < np.abs(audio).max() <= 1.0  # speech, not silence or garbage
    starts = [s.start_sample for s in turn.segments]
    assert starts[0] == (OPUS_DELAY if fmt == "opus" else 0)
    assert [w.text for w in turn.words] == REPLY.split()
    word_starts = [w.start_sample for w in turn.words]
    assert word_starts == sorted(word_starts) and word_starts[-1] < turn.samples
    # Each segment's first word starts soon after the segment does: at most 60 ms over 1,440
    # syntheses (Piper samples the lead's length with noise; see test_e2e), 100 ms with margin.
    index = 0
    for segment in turn.segments:
        assert 0 <= turn.words[index].start_sample - segment.start_sample < 0.1 * rate
        index += len(segment.text.split())


@pytest.mark.parametrize(("rate", "fmt"), [(8000, "pcm_mulaw"), (48000, "pcm_s16le")])
async def test_heard_text_counts_samples_at_the_output_rate(
    server: VoicewsServer, rate: int, fmt: str
) -> None:
    """``playback.samples_played`` at the session's rate cuts ``heard_text`` to the word."""
    async with await RealtimeClient.connect(url(server, rate, fmt)) as client:
        await client.turn_reset("cut")
        await client.text_delta(REPLY)
        await client.end_text()
        turn = client.new_turn("cut")
        played: int | None = None
        third = ""
        while played is None or turn.samples <= played:
            match await client.recv(timeout(20)):
                case AudioFrame() as frame:
                    turn.frames.append(frame)
                case Words() as placed if len(placed.words) >= 4 and played is None:
                    turn.words += placed.words
                    played = placed.words[2].start_sample + 1  # its third word just started
                    third = placed.words[2].text
                case Words() as placed:
                    turn.words += placed.words
        await client.playback("cut", played)
        await client.cancel()
        await asyncio.wait_for(client.collect(turn), timeout(20))
    assert turn.done is not None and turn.done.cancelled
    heard = " ".join(w.text for w in turn.words if w.start_sample < played)
    assert turn.done.heard_text == heard and heard.split()[-1] == third
    assert REPLY.startswith(heard) and len(heard) < len(REPLY) - 20


async def test_a_format_change_applies_from_the_next_turn(client: RealtimeClient) -> None:
    """session_update mid-turn: the ack says what the next turn gets, and the live turn's
    frames keep the format it started with."""
    native = client.audio
    await client.turn_reset("before")
    await client.text_delta(REPLY)
    await client.end_text()
    before = client.new_turn("before")
    while not before.frames:
        item = await client.recv(timeout(20))
        if isinstance(item, AudioFrame):
            before.frames.append(item)
            before.pcm += item.pcm
    await client.session_update(audio=AudioUpdate(sample_rate=8000, format="pcm_mulaw"))
    await asyncio.wait_for(client.collect(before), timeout(20))
    assert before.done is not None and not before.done.cancelled
    assert all(len(f.pcm) == 2 * f.samples for f in before.frames)  # still PCM16
    assert abs(before.duration - before.done.samples / native.sample_rate) < 1e-9
    assert 5.0 < before.duration < 12.0
    assert client.audio == AudioFormat(sample_rate=8000, format="pcm_mulaw")
    after = await client.speak("Now on the phone.", timeout=timeout(20))
    assert (after.sample_rate, after.format) == (8000, "pcm_mulaw")
    assert_framed(after, 8000, "pcm_mulaw")


async def test_the_ack_names_the_live_turn(client: RealtimeClient) -> None:
    await client.session_update(audio=AudioUpdate(format="opus"))
    ack = await client.recv(timeout(5))
    opus = AudioFormat(sample_rate=48000, format="opus")
    assert ack == SessionUpdated(
        audio=opus, speed=1.0, voice=BUNDLED_VOICE, normalization="auto", locale="en-US"
    )
    await client.turn_reset("live")
    assert await client.recv(timeout(5)) == TurnStarted(turn_id="live")
    await client.session_update(speed=1.25)
    ack = await client.recv(timeout(5))
    assert isinstance(ack, SessionUpdated)
    assert (ack.audio.format, ack.speed, ack.live_turn_id) == ("opus", 1.25, "live")


async def test_bad_formats_are_refused_and_change_nothing(
    server: VoicewsServer, client: RealtimeClient
) -> None:
    for query, mentions in [
        ("sample_rate=11025", b"8000, 16000, 22050, 24000, 44100 or 48000"),
        ("format=ulaw", b"'pcm_s16le', 'pcm_f32le', 'pcm_mulaw', 'pcm_alaw' or 'opus'"),
        ("format=opus&sample_rate=8000", b"48000"),
    ]:
        with pytest.raises(InvalidStatus) as refused:
            await RealtimeClient.connect(f"{server.url}?{query}")
        assert refused.value.response.status_code == 400
        assert mentions in refused.value.response.body, refused.value.response.body
    for update in (
        '{"type": "session_update", "audio": {"sample_rate": 12000}}',
        '{"type": "session_update", "audio": {"format": "mp3"}}',
        '{"type": "session_update", "audio": {"format": "opus", "sample_rate": 24000}}',
    ):
        await client.ws.send(update)
        refused_update = await client.recv(timeout(5))
        assert isinstance(refused_update, Error)
        assert (
            refused_update.code == ErrorCode.INVALID_MESSAGE and "audio" in refused_update.message
        )
    await client.session_update(audio=AudioUpdate(format="opus"))
    await client.recv(timeout(5))
    await client.ws.send('{"type": "session_update", "audio": {"sample_rate": 8000}}')
    refused_update = await client.recv(timeout(5))
    assert isinstance(refused_update, Error) and "opus" in refused_update.message
    turn = await client.speak("Still opus.", timeout=timeout(20))
    assert (turn.sample_rate, turn.format) == (48000, "opus")
    assert_framed(turn, 48000, "opus")
