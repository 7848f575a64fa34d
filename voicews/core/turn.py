"""One turn: its state, the text it takes, its audio, and what its listener has heard.

``turn_reset`` opens a turn; it takes ``text_delta`` until ``end_text`` closes it (in agent
mode a language model writes the text instead); closed and spoken, it is done. The turn
refuses what it cannot take with a typed error; the session decides when its segments go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from ..audio import Audio, StitchConfig
from ..encoding import FrameEncoder
from ..errors import ErrorCode, VoicewsError
from ..text.reading import Reading
from ..text.segmenter import Segment, Segmenter, SegmenterConfig
from .listener import ListenerClock
from .track import Track


class TurnState(Enum):
    OPEN = "open"
    """Taking ``text_delta``."""
    WRITING = "writing"
    """Agent mode: the model is writing the text."""
    CLOSED = "closed"
    """All the text is in: the rest is spoken, then the turn is done."""


@dataclass
class InFlight:
    """The turn's segment with the compute worker."""

    job_id: int
    segment: Segment
    submitted_at: float
    reading: Reading | None = None
    """How the segment's text was read (None: as written)."""
    expected_wait: float = 0.0
    """Seconds the queue said it would wait when it was asked for (``Pacing.queue_wait``)."""
    sounded: bool = False
    """It has produced audio (and its latency was observed)."""
    samples: int = 0
    """The engine's samples it has produced."""
    trial: bool = False
    """A first segment asked for before the next token confirmed its last word: what it gives
    is held until then, and dropped if the word grows. Or one held for the lead (``lead``)."""
    lead: bool = False
    """A conversation's first segment, asked for before its text rate was known: what it
    gives is held until the rate is known and, where the text comes slowly, until the lead is
    in hand (``Pacing.holds_lead``). Said at once, "Hmm," was followed by a reply said a
    word at a time at 5 tokens a second."""
    held: list[Audio] = field(default_factory=list)
    """A trial's audio, until it is confirmed."""
    held_words: Sequence[int] | None = None
    """Word starts not placed yet: a trial's, until it is confirmed, or any that came before
    the segment sounded (an engine may place its words just before its last chunk)."""
    done: bool = False
    """The engine has given all of it (a trial's end waits for its confirmation)."""


class Turn:
    def __init__(
        self,
        turn_id: str,
        now: float,
        sample_rate: int,
        encoder: FrameEncoder,
        segmenter: SegmenterConfig,
        stitch: StitchConfig,
        context_id: str | None = None,
    ) -> None:
        """``sample_rate`` is the engine's; ``encoder`` makes the turn's frames, at its own
        output rate, which every count of the turn's samples uses; ``context_id`` names the
        context it speaks in (None: the socket's one unnamed context)."""
        self.id = turn_id
        self.context_id = context_id
        self.state = TurnState.OPEN
        self.segmenter = Segmenter(segmenter)
        self.track = Track(turn_id, sample_rate, encoder, stitch, context_id)
        self.listener = ListenerClock(encoder.sample_rate)
        """What a real-time listener has of the frames sent."""
        self.started = self.last_delta = now
        self.first_delta: float | None = None
        """When the first text that says something came."""
        self.text_chars = 0
        self.first_submitted = False
        self.in_flight: InFlight | None = None
        self.samples_played: int | None = None
        """As the client last reported."""
        self.writer: int | None = None
        """Agent mode: the job writing the text."""
        self.reply: list[str] | None = None
        """Agent mode: the text written so far."""

    def take(self, what: str) -> None:
        """Refuse ``what``, a client message about the turn's text, unless the turn is open."""
        if self.state is not TurnState.OPEN:
            why = "it is a generated reply" if self.reply is not None else "end_text was sent"
            raise VoicewsError(
                ErrorCode.TURN_CLOSED, f"{what} refused for turn {self.id!r}: {why}", self.id
            )

    def check_delta(self, text: str, max_turn_chars: int, max_pending_chars: int) -> None:
        if self.text_chars + len(text) > max_turn_chars:
            raise VoicewsError(
                ErrorCode.TURN_TEXT_TOO_LONG,
                f"turn text would exceed {max_turn_chars} characters; delta refused",
                self.id,
            )
        if self.segmenter.pending_chars + len(text) > max_pending_chars:
            raise VoicewsError(
                ErrorCode.TEXT_BACKLOG_FULL,
                f"unspoken text would exceed {max_pending_chars} characters; "
                "delta refused, send it again once audio has been read",
                self.id,
            )

    def feed(self, text: str, now: float) -> None:
        """Text to speak, from the client or from the model."""
        self.segmenter.feed(text)
        self.text_chars += len(text)
        self.last_delta = now
        if self.first_delta is None and text.strip():
            self.first_delta = now

    def write(self, job_id: int) -> None:
        """Agent mode: the model writes the text, in job ``job_id``."""
        self.state, self.writer, self.reply = TurnState.WRITING, job_id, []

    def close_text(self) -> None:
        """All the text is in (``end_text``, or the model is done): speak the rest."""
        self.state, self.writer = TurnState.CLOSED, None
        self.segmenter.close()

    def played(self, samples: int) -> None:
        self.samples_played = max(self.samples_played or 0, samples)

    def idle(self, now: float, flush_after: float) -> bool:
        """Text stopped coming mid-sentence, with more to come: speak what there is."""
        return self.state is not TurnState.CLOSED and now - self.last_delta >= flush_after

    @property
    def drained(self) -> bool:
        return self.state is TurnState.CLOSED and not self.segmenter.has_text

    def heard(self) -> str:
        """What the listener heard of it: the sent words (or segments) that had started as
        far as the client last reported playing."""
        sent = self.listener.received
        return self.track.heard(min(sent, self.samples_played or sent))

    def jobs(self) -> list[int]:
        """The jobs of this turn with the compute worker."""
        synthesis = [self.in_flight.job_id] if self.in_flight is not None else []
        return synthesis + ([self.writer] if self.writer is not None else [])
