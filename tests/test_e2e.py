"""End to end: a real server on loopback, real websockets clients, the real bundled voice."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import wave
from pathlib import Path

import numpy as np

from conftest import TEST_CONFIG, http_get, running, timeout
from voicews.audio import from_pcm16
from voicews.client import RealtimeClient, SpokenTurn
from voicews.errors import ErrorCode
from voicews.protocol import AudioFrame, Error, SegmentStarted, TurnDone, TurnStarted, Words
from voicews.server import VoicewsServer

REPLY = (
    "Sure, I can help with that. The forecast for tomorrow is sunny, with a high of 24 "
    "degrees and a light breeze. Dr. Lee says it is a good day for a walk, e.g. in the park."
)
LONG = " ".join(
    f"This is sentence number {i}, which keeps the speaker busy for a while." for i in range(25)
)
FRAME_SAMPLES = 22050 * TEST_CONFIG.session.frame_ms // 1000


def assert_intact(turn: SpokenTurn) -> None:
    """Frames in order, contiguous, bounded, and turn_done counts exactly what came."""
    assert turn.done is not None and not turn.done.cancelled
    position = 0
    for seq, frame in enumerate(turn.frames):
        assert (frame.seq, frame.start_sample) == (seq, position)
        assert 0 < frame.samples <= FRAME_SAMPLES
        position += frame.samples
    assert turn.done.samples == turn.samples == position
    starts = [s.start_sample for s in turn.segments]
    assert starts == sorted(starts) and starts[0] == 0


def words(text: str) -> list[str]:
    return text.split()


async def test_turn_streams_while_text_arrives(client: RealtimeClient) -> None:
    turn = await client.speak(REPLY, tokens_per_s=50, timeout=timeout(30))
    assert_intact(turn)
    assert not turn.errors
    assert turn.first_audio is not None and turn.end_text_at is not None
    assert turn.frame_times[0] < turn.end_text_at  # speech began before the text was complete
    assert words(" ".join(s.text for s in turn.segments)) == words(REPLY)
    assert len(words(turn.segments[0].text)) <= 3  # eager first segment
    assert 6.0 < turn.duration < 20.0


async def test_whole_text_in_one_delta(client: RealtimeClient) -> None:
    turn = await client.speak("Hello there, how can I help?", timeout=timeout(20))
    assert_intact(turn)
    assert [s.text for s in turn.segments] == ["Hello there,", "how can I help?"]


async def test_barge_in_cuts_the_turn_at_once(client: RealtimeClient) -> None:
    await client.turn_reset("long")
    await client.text_delta(LONG)
    await client.end_text()
    first = await client.recv(timeout(20))
    while not isinstance(first, AudioFrame):
        first = await client.recv(timeout(20))
    await client.turn_reset("next")
    received = first.samples
    while True:
        item = await client.recv(timeout(10))
        if isinstance(item, AudioFrame):
            assert item.turn_id == "long"  # frames already in flight before the reset
            received += item.samples
        elif isinstance(item, TurnDone):
            break
    assert isinstance(item, TurnDone) and item.turn_id == "long" and item.cancelled
    assert item.samples == received
    assert item.heard_text and LONG.startswith(item.heard_text)
    assert received < 22050 * 30  # far less than the whole long text
    new = SpokenTurn("next", client.sample_rate)
    await client.text_delta("Okay, stopping.")
    await client.end_text()
    await asyncio.wait_for(client.collect(new), timeout(20))
    assert_intact(new)
    assert all(f.turn_id == "next" for f in new.frames)


async def test_words_are_placed_and_a_cut_turn_was_heard_to_the_word(
    client: RealtimeClient,
) -> None:
    """The bundled voice gives phoneme durations: every segment's words come with their start
    samples, and a turn cut inside a segment reports the words that had started playing."""
    whole = await client.speak(REPLY, timeout=timeout(30))
    assert [w.text for w in whole.words] == REPLY.split()
    starts = [w.start_sample for w in whole.words]
    assert starts == sorted(starts) and starts[-1] < whole.samples
    # Each segment's words lie within it, the first soon after its start: after the BOS and
    # pad ids, whose lengths Piper samples with noise (noise_w). Over 1,440 syntheses of every
    # segment REPLY can start with, the first word came at most 1,331 samples (60 ms) after
    # the segment's start once the lead silence was trimmed; 100 ms bounds that with margin.
    # "e.g." is excluded: espeak says "for example" in the sentence, so its own phonemes do
    # not match and it is placed up to 160 ms in.
    ends = [s.start_sample for s in whole.segments[1:]] + [whole.samples]
    first_words, index = [], 0
    for segment, end in zip(whole.segments, ends, strict=True):
        placed = whole.words[index : index + len(segment.text.split())]
        assert segment.start_sample <= placed[0].start_sample and placed[-1].start_sample < end
        if placed[0].text != "e.g.":
            first_words.append(placed[0].start_sample - segment.start_sample)
        index += len(placed)
    assert all(d < 0.1 * whole.sample_rate for d in first_words), first_words

    await client.turn_reset("cut")
    await client.text_delta(REPLY)
    await client.end_text()
    turn = SpokenTurn("cut", client.sample_rate)
    played: int | None = None
    while played is None or turn.samples <= played:
        match await client.recv(timeout(20)):
            case AudioFrame() as frame:
                turn.frames.append(frame)
                turn.pcm += frame.pcm
            case Words() as placed if len(placed.words) >= 4 and played is None:
                turn.words += placed.words
                played = placed.words[2].start_sample + 1  # its third word just started
            case Words() as placed:
                turn.words += placed.words
    await client.playback("cut", played)
    await client.cancel()
    await asyncio.wait_for(client.collect(turn), timeout(20))
    assert turn.done is not None and turn.done.cancelled
    heard = " ".join(w.text for w in turn.words if w.start_sample < played)
    assert turn.done.heard_text == heard
    assert REPLY.startswith(heard) and not heard.endswith((".", ","))  # mid-segment


async def test_first_words_tried_while_the_worker_is_idle_go_out_once_confirmed() -> None:
    """ "I see" is synthesized before the next token says the word is whole; it goes out once
    it does, and is dropped when the word grows ("seem"): either way the client hears the text
    as it was written, and the metrics count each trial."""
    async with running() as srv, await RealtimeClient.connect(srv.url) as c:
        confirmed = await c.speak(
            ["I", " see", " your", " table."], tokens_per_s=10, timeout=timeout(20)
        )
        grown = await c.speak(
            ["I", " see", "m", " fine", " now."], tokens_per_s=10, timeout=timeout(20)
        )
        metrics = (await http_get(srv.port, "/metrics"))[2].decode()
    assert [g.text for g in confirmed.segments][:1] == ["I see"]
    assert [g.text for g in grown.segments][:1] == ["I seem"]
    assert [w.text for w in grown.words][:3] == ["I", "seem", "fine"]
    assert not confirmed.errors and not grown.errors
    for outcome, count in (("confirmed", 2), ("dropped", 1)):
        line = f'voicews_first_word_trials_total{{outcome="{outcome}"}} {count:.1f}'
        assert line in metrics.splitlines(), metrics


async def test_bad_input_gets_typed_errors_and_the_session_goes_on(
    client: RealtimeClient,
) -> None:
    limits = client.created.limits
    cases: list[tuple[str | bytes, ErrorCode]] = [
        ("{oops", ErrorCode.INVALID_JSON),
        ('{"type": "sing"}', ErrorCode.UNKNOWN_TYPE),
        ('{"type": "turn_reset"}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "text_delta", "text": 5}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "text_delta", "text": "hi"}', ErrorCode.NO_ACTIVE_TURN),
        ('{"type": "end_text"}', ErrorCode.NO_ACTIVE_TURN),
        (b"\x81\xa4type", ErrorCode.BINARY_NOT_SUPPORTED),
        (
            json.dumps({"type": "text_delta", "text": "x" * limits.max_message_bytes}),
            ErrorCode.MESSAGE_TOO_LARGE,
        ),
    ]
    for data, code in cases:
        await client.ws.send(data)
        event = await client.recv(timeout(5))
        assert isinstance(event, Error), event
        assert event.code == code and event.message
    await client.turn_reset("a")
    assert await client.recv(timeout(5)) == TurnStarted(turn_id="a")
    await client.turn_reset("a")
    dup = await client.recv(timeout(5))
    assert isinstance(dup, Error) and dup.code == ErrorCode.DUPLICATE_TURN_ID
    await client.text_delta("y" * (limits.max_pending_text_chars + 1))
    full = await client.recv(timeout(5))
    assert isinstance(full, Error) and full.code == ErrorCode.TEXT_BACKLOG_FULL
    await client.end_text()  # an empty turn is done at once
    done = await client.recv(timeout(5))
    assert done == TurnDone(turn_id="a", samples=0, cancelled=False)
    await client.end_text()
    late = await client.recv(timeout(5))
    assert isinstance(late, Error) and late.code == ErrorCode.NO_ACTIVE_TURN
    turn = await client.speak("Still working.", timeout=timeout(20))
    assert_intact(turn)
    assert not turn.errors


async def test_four_concurrent_sessions(server: VoicewsServer) -> None:
    texts = [
        "Good morning, your first meeting is at nine.",
        "The package shipped yesterday and should arrive on Friday.",
        "I found three restaurants nearby, all open until ten.",
        "Your balance is 42 dollars and 17 cents.",
    ]

    async def one(text: str) -> SpokenTurn:
        async with await RealtimeClient.connect(server.url) as c:
            return await c.speak(text, tokens_per_s=20, timeout=timeout(30))

    turns = await asyncio.gather(*(one(t) for t in texts))
    for text, turn in zip(texts, turns, strict=True):
        assert_intact(turn)
        assert words(" ".join(s.text for s in turn.segments)) == words(text)
        assert len(words(turn.segments[0].text)) <= 3  # speech began on the first words


async def test_long_turn_does_not_starve_another_sessions_first_audio(
    server: VoicewsServer,
) -> None:
    async with (
        await RealtimeClient.connect(server.url) as a,
        await RealtimeClient.connect(server.url) as b,
    ):
        long = asyncio.create_task(a.speak(LONG, timeout=timeout(60)))
        while server.worker.stats.jobs_done < 3:  # the long turn is well under way
            await asyncio.sleep(0.01)
        short = await b.speak("Hi, quick question.", timeout=timeout(30))
        assert not long.done()  # the short turn finished while the long one still runs
        long_turn = await long
    assert_intact(short)
    assert_intact(long_turn)
    assert short.done_at is not None and long_turn.done_at is not None
    assert short.done_at < long_turn.done_at


async def test_slow_reader_pauses_only_its_own_synthesis(server: VoicewsServer) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    slow = await RealtimeClient.connect(server.url, sock=sock, max_queue=1)
    async with slow:
        text = LONG[: TEST_CONFIG.session.max_pending_text_chars - 10]
        await slow.turn_reset("slow")
        await slow.text_delta(text)
        await slow.end_text()
        assert server.app is not None
        session = server.app.sessions[slow.created.session_id]
        bound = TEST_CONFIG.session.max_pending_audio_ms * 22050 // 1000
        # The queue fills (nobody reads), and the segment in synthesis when it did finishes.
        while session.outbox.samples < bound or session.synthesizing:
            await asyncio.sleep(0.02)
        jobs = server.worker.stats.jobs_done
        # Meanwhile another session is served as usual.
        async with await RealtimeClient.connect(server.url) as other:
            quick = await other.speak("I am not blocked.", timeout=timeout(20))
        assert_intact(quick)
        await asyncio.sleep(0.5)
        assert server.worker.stats.jobs_done - jobs <= 2  # only the other session's jobs ran
        # Text beyond the bound is refused while the reader lags; it reads it in order.
        await slow.text_delta("x" * 20)
        turn = SpokenTurn("slow", slow.sample_rate)
        await asyncio.wait_for(slow.collect(turn), timeout(60))
    assert_intact(turn)
    assert [e.code for e in turn.errors] == [ErrorCode.TURN_CLOSED]
    assert words(" ".join(s.text for s in turn.segments)) == words(text)


async def test_idle_flush_speaks_text_that_stops_without_end_text(
    client: RealtimeClient,
) -> None:
    await client.turn_reset("idle")
    await client.text_delta("Let me check the weather for")
    await client.text_delta(" you")
    turn = SpokenTurn("idle", client.sample_rate)
    while not turn.frames:  # audio comes without end_text: the idle flush spoke it
        item = await client.recv(timeout(10))
        if isinstance(item, SegmentStarted):
            turn.segments.append(item)
        elif isinstance(item, AudioFrame):
            turn.frames.append(item)
            turn.pcm += item.pcm
    await client.end_text()
    await asyncio.wait_for(client.collect(turn), timeout(10))
    assert_intact(turn)
    assert words(" ".join(s.text for s in turn.segments)) == words(
        "Let me check the weather for you"
    )


async def test_segment_joins_are_no_steeper_than_the_speech(client: RealtimeClient) -> None:
    turn = await client.speak(REPLY, tokens_per_s=50, timeout=timeout(30))
    audio = from_pcm16(bytes(turn.pcm))
    jumps = np.abs(np.diff(audio))
    window = int(0.03 * turn.sample_rate)
    joins = [s.start_sample for s in turn.segments[1:]]
    assert joins
    mask = np.ones_like(jumps, dtype=bool)
    for j in joins:
        mask[max(0, j - window) : j + window] = False
    inside = jumps[mask].max()
    for j in joins:
        assert jumps[max(0, j - window) : j + window].max() <= inside


async def test_say_command_writes_a_wav(server: VoicewsServer, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "voicews.cli",
        "say",
        "Hello there, how can I help?",
        "-o",
        str(out),
        "--url",
        server.url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout(30))
    assert proc.returncode == 0, stderr.decode()
    assert b"first audio after" in stdout and b"real-time factor" in stdout
    with wave.open(str(out)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (22050, 1, 2)
        assert wav.getnframes() > 22050


async def test_say_streams_stdin_as_it_arrives(server: VoicewsServer, tmp_path: Path) -> None:
    out = tmp_path / "stream.wav"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "voicews.cli",
        "say",
        "-o",
        str(out),
        "--url",
        server.url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"Streaming from standard input, ")
    await proc.stdin.drain()
    await asyncio.sleep(0.3)
    proc.stdin.write("word by word \u2014 done.\n".encode())
    proc.stdin.close()
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout(30))
    assert proc.returncode == 0, stderr.decode()
    with wave.open(str(out)) as wav:
        assert wav.getnframes() > 22050


async def test_a_short_first_segment_is_followed_by_audio_not_silence(
    client: RealtimeClient,
) -> None:
    """ "Hmm," is short by design (the first clause, for the earliest audio): the next segment
    is computed before it runs out, so the listener hears no gap after it."""
    text = "Hmm, let me check that for you. It should only take a moment."
    turn = await client.speak(text, tokens_per_s=20, timeout=timeout(30))
    assert_intact(turn)
    assert turn.segments[0].text == "Hmm,"
    assert turn.stall() < 0.1  # an audible gap; none on a quiet machine
