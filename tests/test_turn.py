"""One turn's states and what it takes; the session tests drive it through whole turns."""

from __future__ import annotations

import pytest

from voicews.audio import StitchConfig
from voicews.core.turn import Turn, TurnState
from voicews.encoding import FrameEncoder, OutputFormat
from voicews.errors import ErrorCode, VoicewsError
from voicews.text.segmenter import SegmenterConfig


def make(now: float = 0.0) -> Turn:
    encoder = FrameEncoder(1000, OutputFormat(1000), 40)
    return Turn("t1", now, 1000, encoder, SegmenterConfig(), StitchConfig())


def refused(turn: Turn, what: str = "text_delta") -> ErrorCode:
    with pytest.raises(VoicewsError) as exc:
        turn.take(what)
    return exc.value.code


def test_an_open_turn_takes_text_until_it_is_closed() -> None:
    turn = make()
    turn.take("text_delta")
    turn.feed("  ", 1.0)  # nothing said yet
    turn.feed("Hello", 2.0)
    assert (turn.text_chars, turn.last_delta, turn.first_delta) == (7, 2.0, 2.0)
    assert not turn.drained
    turn.close_text()
    assert turn.state is TurnState.CLOSED and refused(turn) == ErrorCode.TURN_CLOSED
    assert turn.segmenter.has_text and not turn.drained


def test_text_over_the_limits_is_refused_and_not_taken() -> None:
    turn = make()
    turn.check_delta("x" * 10, max_turn_chars=10, max_pending_chars=10)
    with pytest.raises(VoicewsError) as long:
        turn.check_delta("x" * 11, max_turn_chars=10, max_pending_chars=100)
    with pytest.raises(VoicewsError) as backlog:
        turn.check_delta("x" * 11, max_turn_chars=100, max_pending_chars=10)
    assert (long.value.code, backlog.value.code) == (
        ErrorCode.TURN_TEXT_TOO_LONG,
        ErrorCode.TEXT_BACKLOG_FULL,
    )
    assert turn.text_chars == 0


def test_a_written_turn_refuses_client_text_and_knows_its_writer() -> None:
    turn = make()
    turn.write(7)
    assert turn.state is TurnState.WRITING and turn.jobs() == [7]
    with pytest.raises(VoicewsError, match="generated reply"):
        turn.take("end_text")
    turn.close_text()  # the model is done
    assert turn.writer is None and turn.jobs() == []
    with pytest.raises(VoicewsError, match="generated reply"):
        turn.take("text_delta")


def test_idle_only_while_text_may_still_come() -> None:
    turn = make(now=1.0)
    assert not turn.idle(1.4, flush_after=0.5) and turn.idle(1.5, flush_after=0.5)
    turn.close_text()
    assert not turn.idle(9.0, flush_after=0.5)


def test_heard_is_what_was_sent_as_far_as_the_client_played() -> None:
    turn = make()
    turn.track.spoken = [(0, "Hello"), (300, "there,"), (700, "friend.")]
    turn.listener.add(800, 0.0)  # sent: all three have started
    assert turn.heard() == "Hello there, friend."
    turn.played(301)
    turn.played(100)  # reports only move forward
    assert turn.heard() == "Hello there,"
