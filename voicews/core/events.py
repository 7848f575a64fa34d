"""What the session core says, as plain values: each dialect renders them in its own wire.

The realtime protocol's events carry the same names and fields (``voicews.protocol``); the
HTTP speech and Wyoming dialects take only what they need (audio, the end, refusals).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..encoding import OutputFormat
from ..errors import CloseCode
from ..text.numbers import Locale
from .config import Normalization

ContextCloseReason = Literal["closed", "idle_timeout"]


@dataclass(frozen=True, slots=True)
class SessionUpdated:
    """A settings update took effect: these are in force now."""

    audio: OutputFormat
    """The format of every turn started from now on."""
    speed: float
    voice: str | None = None
    live_turn_id: str | None = None
    """The turn live when the update came: it keeps the format it started with."""
    normalization: Normalization = "auto"
    locale: Locale = "en-US"
    context_idle_s: float | None = None
    """Where the update set it: how long a context may sit idle before it is closed."""


@dataclass(frozen=True, slots=True)
class TurnStarted:
    turn_id: str
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReplyDelta:
    """Agent mode: the reply's text as the language model writes it."""

    turn_id: str
    text: str


@dataclass(frozen=True, slots=True)
class Pong:
    id: str | None = None


@dataclass(frozen=True, slots=True)
class SegmentStarted:
    """A piece of text starts being spoken at ``start_sample`` of its turn."""

    turn_id: str
    text: str
    start_sample: int
    spoken: str | None = None
    """What was synthesized for ``text``, where normalization read it otherwise."""
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class WordMark:
    text: str
    start_sample: int


@dataclass(frozen=True, slots=True)
class Words:
    """Where each word of the latest segment starts."""

    turn_id: str
    words: list[WordMark]
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class TurnDone:
    """After the turn's last frame; a cut turn says what had been heard."""

    turn_id: str
    samples: int
    cancelled: bool
    heard_text: str | None = None
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class Error:
    """A refusal; ``code`` is an :class:`~voicews.errors.ErrorCode` value."""

    code: str
    message: str
    turn_id: str | None = None
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """One frame: ``pcm`` in the turn's format, ``samples`` what it decodes to, and
    ``start_sample`` where it starts in the turn, both at the turn's output rate."""

    turn_id: str
    seq: int
    start_sample: int
    pcm: bytes
    samples: int
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class ContextClosed:
    """A context is gone, its queued work dropped: the client closed it, or it sat idle."""

    context_id: str
    reason: ContextCloseReason


@dataclass(frozen=True, slots=True)
class Close:
    """The session asks its connection to close once the outbox is sent."""

    code: CloseCode
    reason: str


Event = (
    SessionUpdated
    | TurnStarted
    | ReplyDelta
    | Pong
    | SegmentStarted
    | Words
    | TurnDone
    | Error
    | ContextClosed
)
Outgoing = Event | AudioFrame
"""What waits in a session's outbox, in order."""
