"""One connection's realtime session as a sans-I/O state machine.

Messages and synthesis results go in with the current time; events, audio frames (in
``outbox``), synthesis requests and cancellations come out. No sockets, threads or clocks:
the server moves the bytes, the compute worker runs the requests, tests drive it directly.

Turn lifecycle: ``turn_reset`` -> ``text_delta``* -> ``end_text`` -> drain -> ``turn_done``.
A ``turn_reset`` while a turn is live is a barge-in: its queued audio is dropped, its
synthesis is cancelled, and it ends at once with ``turn_done`` ``cancelled: true``.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .audio import Audio, StitchConfig, Stitcher, frames, to_pcm16
from .engines.base import SynthesisOptions
from .errors import ErrorCode, VoicewsError
from .protocol import (
    AudioFormat,
    AudioFrame,
    Cancel,
    ClientMessage,
    EndText,
    Error,
    Limits,
    Ping,
    Playback,
    Pong,
    ReplyDelta,
    SegmentStarted,
    SessionCreated,
    SessionUpdate,
    TextDelta,
    TurnDone,
    TurnReset,
    TurnStarted,
    UserMessage,
    WordMark,
    Words,
    unknown_voice,
)
from .segmenter import Segment, Segmenter, SegmenterConfig, Urgency

Outgoing = (
    SessionCreated
    | TurnStarted
    | ReplyDelta
    | SegmentStarted
    | Words
    | TurnDone
    | Error
    | Pong
    | AudioFrame
)
# Seconds from submitting a segment to its first audio, per character of its text (the
# engine may compute the whole segment first), until measured; short texts count as 20.
_INITIAL_LATENCY_PER_CHAR = 0.1 / 20
_MIN_CHARS = 20
_STALL_TOLERANCE = 0.02  # a frame this late after the listener ran dry counts as a stall


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Agent mode: the server generates replies to ``user_message`` with a language model."""

    max_tokens: int = 200
    history_messages: int = 20
    """Messages of conversation kept per session (the system prompt aside)."""
    system_prompt: str = (
        "You are a helpful voice assistant. Answer briefly, in plain spoken sentences."
    )


@dataclass(frozen=True, slots=True)
class SessionConfig:
    max_message_bytes: int = 64 * 1024
    max_turn_text_chars: int = 20_000
    max_pending_text_chars: int = 4_000
    max_pending_audio_ms: int = 2_000
    """Audio queued for a socket beyond this pauses the session's synthesis."""
    frame_ms: int = 40
    idle_flush_ms: int = 500
    """Text that stops arriving mid-sentence (without ``end_text``) is spoken after this."""
    stall_guard_ms: int = 150
    """Cut at a clause once the listener has less audio left than this margin plus the
    synthesis latency the session has been seeing; at any word once a third of it is left."""
    max_messages_per_second: int = 200
    """Sustained client message rate; bursts of one second's worth are allowed."""
    max_sessions: int = 64
    """Concurrent sessions per server; more are refused at connect time (HTTP 503)."""
    idle_timeout_s: float = 300.0
    """A session with no turn and no message for this long is closed."""
    max_turn_seconds: float = 600.0
    """A turn still live this long after its ``turn_reset`` is cut."""
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    stitch: StitchConfig = field(default_factory=StitchConfig)
    agent: AgentConfig | None = None
    voices: tuple[str, ...] = ()
    """The engine's voices (``engines.engine_voices``), the default first."""

    def limits(self) -> Limits:
        return Limits(
            max_message_bytes=self.max_message_bytes,
            max_turn_text_chars=self.max_turn_text_chars,
            max_pending_text_chars=self.max_pending_text_chars,
            max_pending_audio_ms=self.max_pending_audio_ms,
            max_messages_per_second=self.max_messages_per_second,
            max_sessions=self.max_sessions,
            idle_timeout_s=self.idle_timeout_s,
            max_turn_seconds=self.max_turn_seconds,
        )


@dataclass(slots=True)
class SessionStats:
    """What the session saw, for metrics; the I/O layer drains the lists."""

    first_audio: list[float] = field(default_factory=list)
    """Seconds from a turn's first text delta to its first frame sent."""
    stalls: list[float] = field(default_factory=list)
    """Seconds a real-time listener would have waited with nothing to play."""
    turns: list[str] = field(default_factory=list)
    """How each turn ended: done, cancelled, failed."""
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Close:
    """The session asks its connection to close once the outbox is sent."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """A segment for the compute worker; ``deadline`` is when the listener runs dry."""

    job_id: int
    turn_id: str
    text: str
    options: SynthesisOptions
    first: bool
    deadline: float
    submitted_at: float


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """Agent mode: generate the reply to ``messages`` on the compute worker."""

    job_id: int
    turn_id: str
    messages: tuple[dict[str, str], ...]
    max_tokens: int


Request = SynthesisRequest | GenerationRequest


@dataclass
class _Turn:
    id: str
    segmenter: Segmenter
    stitcher: Stitcher
    last_delta: float
    closed: bool = False
    text_chars: int = 0
    job: SynthesisRequest | None = None
    segment: Segment | None = None
    job_audio: bool = False  # the job in flight has produced audio
    announced: bool = False
    first_submitted: bool = False
    started: float = 0.0
    first_delta: float | None = None
    seq: int = 0
    samples_queued: int = 0
    samples_sent: int = 0
    samples_played: int | None = None  # as the client last reported
    spoken: list[tuple[int, str]] = field(default_factory=list)  # (start_sample, text)
    play_end: float | None = None  # when a real-time listener runs out of audio
    generation: GenerationRequest | None = None  # agent mode: the reply being generated
    reply: list[str] | None = None  # agent mode: the reply's text so far


class Session:
    def __init__(self, session_id: str, sample_rate: int, config: SessionConfig) -> None:
        self.id = session_id
        self.config = config
        self.sample_rate = sample_rate
        self.outbox: deque[Outgoing] = deque()
        self._outbox_samples = 0
        self._outbox_frames = 0
        self._frame_samples = max(1, sample_rate * config.frame_ms // 1000)
        self._max_pending = sample_rate * config.max_pending_audio_ms // 1000
        self._options = SynthesisOptions()
        self._turn: _Turn | None = None
        self._last_turn_id: str | None = None
        self._job_ids = itertools.count(1)
        self._latency_per_char = _INITIAL_LATENCY_PER_CHAR
        self._submissions: list[Request] = []
        self._history: list[dict[str, str]] = []
        self._reply_ids = itertools.count(1)
        self._cancellations: list[int] = []
        self._bucket = float(config.max_messages_per_second)
        self._bucket_at: float | None = None
        self._last_activity = 0.0
        self._draining = False
        self.close_request: Close | None = None
        self.stats = SessionStats()
        self._finished: _Turn | None = None  # ended, but its last frames may still be queued

    # --- inputs ---------------------------------------------------------------------------

    def created(self) -> SessionCreated:
        return SessionCreated(
            session_id=self.id,
            audio=AudioFormat(sample_rate=self.sample_rate),
            limits=self.config.limits(),
            voices=list(self.config.voices) or None,
        )

    def admit(self, now: float) -> bool:
        """Count one client frame against the rate limit; False (and an error) if over it."""
        rate = self.config.max_messages_per_second
        if self._bucket_at is not None:
            self._bucket = min(float(rate), self._bucket + (now - self._bucket_at) * rate)
        self._bucket_at = now
        self._last_activity = now
        if self._bucket < 1.0:
            self.report(
                VoicewsError(
                    ErrorCode.RATE_LIMITED,
                    f"more than {rate} messages per second; message refused",
                    self._turn.id if self._turn else None,
                )
            )
            return False
        self._bucket -= 1.0
        return True

    def drain(self, now: float) -> None:
        """Server shutdown: finish the current turn, start no new one, then close."""
        self._draining = True
        self._pump(now)

    def start(self, now: float) -> None:
        """The connection is open: the idle clock starts now."""
        self._last_activity = now

    def handle(self, message: ClientMessage, now: float) -> None:
        """Apply one client message; a refusal becomes an ``error`` event in the outbox."""
        try:
            match message:
                case TurnReset():
                    self._turn_reset(message.turn_id, now)
                case TextDelta():
                    self._text_delta(message.text, now)
                case EndText():
                    self._end_text(now)
                case Cancel():
                    if self._turn is None:
                        raise VoicewsError(ErrorCode.NO_ACTIVE_TURN, "cancel: no live turn")
                    self._cut(self._turn, now)
                case SessionUpdate():
                    if message.voice is not None and message.voice not in self.config.voices:
                        raise unknown_voice(message.voice, self.config.voices)
                    changes = message.model_dump(exclude={"type"}, exclude_none=True)
                    self._options = replace(self._options, **changes)
                case UserMessage():
                    self._user_message(message.text, message.turn_id, now)
                case Playback():
                    self._playback(message.turn_id, message.samples_played)
                case Ping():
                    # In order with everything else: a pong also shows what is still queued.
                    self.outbox.append(Pong(id=message.id))
        except VoicewsError as exc:
            self.report(exc)

    def report(self, exc: VoicewsError) -> None:
        self.stats.errors.append(exc.code)
        self.outbox.append(Error(code=exc.code, message=exc.message, turn_id=exc.turn_id))

    def on_audio(self, job_id: int, audio: Audio, now: float) -> None:
        turn = self._job_turn(job_id)
        if turn is None or turn.job is None:
            return
        if not turn.job_audio:
            turn.job_audio = True
            self._observe_latency(now - turn.job.submitted_at, len(turn.job.text))
        self._emit(turn, turn.stitcher.push(audio))

    def on_words(self, job_id: int, starts: Sequence[int]) -> None:
        """The engine placed the segment's words: tell the client, and keep them, so a cut
        turn's ``heard_text`` ends at the last word that had started playing."""
        turn = self._job_turn(job_id)
        if turn is None or turn.segment is None or not turn.announced:
            return
        words = turn.segment.text.split()
        if len(starts) != len(words):
            return  # an engine that miscounted: the segment stays one unit
        base, skipped = turn.spoken[-1][0], turn.stitcher.skipped  # the segment's start
        marks = [
            WordMark(text=word, start_sample=base + max(0, start - skipped))
            for word, start in zip(words, starts, strict=True)
        ]
        self.outbox.append(Words(turn_id=turn.id, words=marks))
        turn.spoken[-1:] = [(mark.start_sample, mark.text) for mark in marks]

    def on_text(self, job_id: int, text: str, now: float) -> None:
        """Agent mode: a delta of the reply being generated; it is spoken like client text."""
        turn = self._generating(job_id)
        if turn is None or turn.reply is None:
            return
        turn.reply.append(text)
        self.outbox.append(ReplyDelta(turn_id=turn.id, text=text))
        turn.segmenter.feed(text)
        turn.text_chars += len(text)
        turn.last_delta = now
        if turn.first_delta is None and text.strip():
            turn.first_delta = now
        self._pump(now)

    def on_done(self, job_id: int, now: float) -> None:
        if (generating := self._generating(job_id)) is not None:
            self._reply_complete(generating, now)
            return
        turn = self._job_turn(job_id)
        if turn is None or turn.segment is None:
            return
        self._emit(turn, turn.stitcher.end_segment(turn.segment.boundary))
        turn.job = turn.segment = None
        self._pump(now)

    def on_failed(self, job_id: int, message: str, now: float) -> None:
        if (generating := self._generating(job_id)) is not None:
            self.report(
                VoicewsError(
                    ErrorCode.GENERATION_FAILED,
                    f"reply generation failed: {message}",
                    generating.id,
                )
            )
            self._reply_complete(generating, now)
            return
        turn = self._job_turn(job_id)
        if turn is None:
            return
        self.report(
            VoicewsError(ErrorCode.SYNTHESIS_FAILED, f"synthesis failed: {message}", turn.id)
        )
        turn.job = turn.segment = None
        self._finish(turn, now, cancelled=True, outcome="failed")

    def tick(self, now: float) -> None:
        """Time passed: flush, stall-guard, turn-duration or idle deadlines may have come."""
        turn = self._turn
        if turn is not None and now - turn.started >= self.config.max_turn_seconds:
            self.report(
                VoicewsError(
                    ErrorCode.TURN_DURATION_EXCEEDED,
                    f"turn {turn.id!r} ran over {self.config.max_turn_seconds:g} s; cut",
                    turn.id,
                )
            )
            self._cut(turn, now)
        elif (
            turn is None
            and self.close_request is None
            and now - self._last_activity >= self.config.idle_timeout_s
        ):
            self.report(
                VoicewsError(
                    ErrorCode.IDLE_TIMEOUT,
                    f"no turn and no message for {self.config.idle_timeout_s:g} s; closing",
                )
            )
            self.close_request = Close(1000, "idle timeout")
        self._pump(now)

    def close(self) -> None:
        """The connection is gone: cancel synthesis and drop everything queued."""
        if self._turn is not None:
            self._cancel_jobs(self._turn)
        self._turn = None
        self.outbox.clear()
        self._outbox_samples = self._outbox_frames = 0

    # --- outputs --------------------------------------------------------------------------

    def pop(self, now: float) -> Outgoing | None:
        """The next thing to send; call it when the socket can take more."""
        if not self.outbox:
            return None
        item = self.outbox.popleft()
        if isinstance(item, AudioFrame):
            self._outbox_samples -= item.samples
            self._outbox_frames -= 1
            turn = self._turn if self._turn is not None else self._finished
            if turn is not None and turn.id == item.turn_id:
                turn.samples_sent += item.samples
                if turn.play_end is None:
                    if turn.first_delta is not None:
                        self.stats.first_audio.append(now - turn.first_delta)
                    start = now
                else:
                    if now - turn.play_end > _STALL_TOLERANCE:
                        self.stats.stalls.append(now - turn.play_end)
                    start = max(turn.play_end, now)
                turn.play_end = start + item.samples / self.sample_rate
            self._pump(now)
        return item

    def take_submissions(self) -> list[Request]:
        out, self._submissions = self._submissions, []
        return out

    def take_cancellations(self) -> list[int]:
        out, self._cancellations = self._cancellations, []
        return out

    def wakeup_at(self, now: float) -> float | None:
        """When ``tick`` should next be called, if nothing else happens first."""
        turn = self._turn
        if turn is None:
            if self.close_request is not None:
                return None
            return self._last_activity + self.config.idle_timeout_s
        limit = turn.started + self.config.max_turn_seconds
        if turn.job is not None or turn.closed or self._paused or not turn.segmenter.has_text:
            return limit
        times = [limit, turn.last_delta + self.config.idle_flush_ms / 1000]
        if turn.play_end is not None:
            for guard in self._guards(turn):
                if turn.play_end - guard > now:
                    times.append(turn.play_end - guard)
        return min(times)

    @property
    def pending_audio_samples(self) -> int:
        return self._outbox_samples

    @property
    def synthesizing(self) -> bool:
        """A segment of this session is with the compute worker."""
        return self._turn is not None and self._turn.job is not None

    @property
    def queued_events(self) -> int:
        """Events (not audio frames) waiting to be sent: the I/O layer stops reading the
        client while many are queued, so a flood that is never read cannot grow them."""
        return len(self.outbox) - self._outbox_frames

    @property
    def _paused(self) -> bool:
        return self._outbox_samples >= self._max_pending

    # --- the machine ----------------------------------------------------------------------

    def _turn_reset(self, turn_id: str, now: float) -> None:
        if self._draining:
            raise VoicewsError(
                ErrorCode.SHUTTING_DOWN, "the server is shutting down; no new turns", turn_id
            )
        if turn_id == self._last_turn_id:
            raise VoicewsError(
                ErrorCode.DUPLICATE_TURN_ID,
                f"turn_id {turn_id!r} is the latest turn's; use a new id per turn",
                turn_id,
            )
        if self._turn is not None:
            self._cut(self._turn, now)
        self._last_turn_id = turn_id
        self._turn = _Turn(
            id=turn_id,
            segmenter=Segmenter(self.config.segmenter),
            stitcher=Stitcher(self.sample_rate, self.config.stitch),
            last_delta=now,
            started=now,
        )
        self.outbox.append(TurnStarted(turn_id=turn_id))

    def _cut(self, turn: _Turn, now: float) -> None:
        """End a live turn at once: drop its queued audio, cancel its synthesis."""
        self._cancel_jobs(turn)
        self._drop_queued(turn.id)
        heard = min(turn.samples_sent, turn.samples_played or turn.samples_sent)
        heard_text = " ".join(text for start, text in turn.spoken if start < heard)
        if turn.reply is not None and heard_text:
            self._remember("assistant", heard_text)  # what the user heard, not what was planned
        self.outbox.append(
            TurnDone(
                turn_id=turn.id, samples=turn.samples_sent, cancelled=True, heard_text=heard_text
            )
        )
        self.stats.turns.append("cancelled")
        self._turn = None
        self._last_activity = now

    def _cancel_jobs(self, turn: _Turn) -> None:
        for request in (turn.job, turn.generation):
            if request is not None:
                self._cancellations.append(request.job_id)

    def _user_message(self, text: str, turn_id: str | None, now: float) -> None:
        agent = self.config.agent
        if agent is None:
            raise VoicewsError(
                ErrorCode.AGENT_UNAVAILABLE,
                "user_message needs a server started with --agent-model; send text_delta",
            )
        self._turn_reset(turn_id or f"reply-{next(self._reply_ids)}", now)
        turn = self._turn
        assert turn is not None
        self._remember("user", text)
        request = GenerationRequest(
            job_id=next(self._job_ids),
            turn_id=turn.id,
            messages=({"role": "system", "content": agent.system_prompt}, *self._history),
            max_tokens=agent.max_tokens,
        )
        turn.generation, turn.reply = request, []
        self._submissions.append(request)

    def _remember(self, role: str, content: str) -> None:
        """Bounded history that starts with a user message, as chat templates expect."""
        assert self.config.agent is not None
        self._history.append({"role": role, "content": content})
        del self._history[: max(0, len(self._history) - self.config.agent.history_messages)]
        while self._history and self._history[0]["role"] != "user":
            del self._history[0]

    def _generating(self, job_id: int) -> _Turn | None:
        """The turn whose reply ``job_id`` generates; None for a cancelled generation."""
        turn = self._turn
        return turn if turn is not None and _is(turn.generation, job_id) else None

    def _reply_complete(self, turn: _Turn, now: float) -> None:
        """The reply is fully generated: remember it, and let the turn drain as after end_text."""
        turn.generation = None
        if turn.reply:
            self._remember("assistant", "".join(turn.reply).strip())
        turn.closed = True
        turn.segmenter.close()
        self._pump(now)

    @property
    def history(self) -> list[dict[str, str]]:
        return list(self._history)

    def _text_delta(self, text: str, now: float) -> None:
        turn = self._open_turn("text_delta")
        if turn.text_chars + len(text) > self.config.max_turn_text_chars:
            raise VoicewsError(
                ErrorCode.TURN_TEXT_TOO_LONG,
                f"turn text would exceed {self.config.max_turn_text_chars} characters; "
                "delta refused",
                turn.id,
            )
        if turn.segmenter.pending_chars + len(text) > self.config.max_pending_text_chars:
            raise VoicewsError(
                ErrorCode.TEXT_BACKLOG_FULL,
                f"unspoken text would exceed {self.config.max_pending_text_chars} characters; "
                "delta refused, send it again once audio has been read",
                turn.id,
            )
        turn.segmenter.feed(text)
        turn.text_chars += len(text)
        turn.last_delta = now
        if turn.first_delta is None and text.strip():
            turn.first_delta = now
        self._pump(now)

    def _end_text(self, now: float) -> None:
        turn = self._open_turn("end_text")
        turn.closed = True
        turn.segmenter.close()
        self._pump(now)

    def _playback(self, turn_id: str, samples_played: int) -> None:
        turn = self._turn
        if turn is None or turn.id != turn_id:
            return  # a report about a finished turn: nothing left to decide with it
        turn.samples_played = max(turn.samples_played or 0, samples_played)

    def _open_turn(self, what: str) -> _Turn:
        turn = self._turn
        if turn is None:
            hint = (
                f"turn {self._last_turn_id!r} is done"
                if self._last_turn_id
                else "no turn was started"
            )
            raise VoicewsError(
                ErrorCode.NO_ACTIVE_TURN, f"{what} refused: {hint}; send turn_reset first"
            )
        if turn.closed or turn.reply is not None:
            why = "it is a generated reply" if turn.reply is not None else "end_text was sent"
            raise VoicewsError(
                ErrorCode.TURN_CLOSED, f"{what} refused for turn {turn.id!r}: {why}", turn.id
            )
        return turn

    def _pump(self, now: float) -> None:
        """Submit the next segment if the turn can take one, and end a drained turn."""
        turn = self._turn
        if turn is None:
            self._close_if_drained()
            return
        if turn.job is not None:
            return
        if not self._paused:
            segment = turn.segmenter.next_segment(self._urgency(turn, now))
            if segment is not None:
                self._submit(turn, segment, now)
                return
        if turn.closed and not turn.segmenter.has_text:
            self._finish(turn, now, cancelled=False, outcome="done")

    def _close_if_drained(self) -> None:
        if self._draining and self._turn is None and self.close_request is None:
            self.close_request = Close(1001, "server shutting down")

    def _urgency(self, turn: _Turn, now: float) -> Urgency:
        idle = not turn.closed and now - turn.last_delta >= self.config.idle_flush_ms / 1000
        if not turn.first_submitted:
            return Urgency.FLUSH if idle else Urgency.FIRST
        if idle:
            return Urgency.FLUSH
        clause_guard, word_guard = self._guards(turn)
        ahead = self._ahead(turn, now)
        if ahead <= word_guard:
            return Urgency.CRITICAL
        if ahead <= clause_guard:
            return Urgency.URGENT
        return Urgency.RELAXED

    def _guards(self, turn: _Turn) -> tuple[float, float]:
        """Audio left at which to cut at a clause, and at which to cut at any word.

        Both leave room for synthesizing all the pending text (up to a segment's cap) at the
        latency per character this session has been seeing.
        """
        chars = min(turn.segmenter.pending_chars, self.config.segmenter.max_chars)
        latency = self._latency_per_char * max(chars, _MIN_CHARS)
        margin = self.config.stall_guard_ms / 1000
        return latency + margin, latency + margin / 3

    def _observe_latency(self, seconds: float, chars: int) -> None:
        """Rise at once with a slower job, decay slowly after."""
        sample = seconds / max(chars, _MIN_CHARS)
        old = self._latency_per_char
        self._latency_per_char = sample if sample > old else 0.9 * old + 0.1 * sample

    def _ahead(self, turn: _Turn, now: float) -> float:
        """Seconds of audio the listener has left, counting audio not yet sent."""
        played = 0.0 if turn.play_end is None else max(turn.play_end - now, 0.0)
        return played + self._outbox_samples / self.sample_rate

    def _submit(self, turn: _Turn, segment: Segment, now: float) -> None:
        first = not turn.first_submitted
        request = SynthesisRequest(
            job_id=next(self._job_ids),
            turn_id=turn.id,
            text=segment.text,
            options=self._options,
            first=first,
            deadline=now if first or turn.play_end is None else turn.play_end,
            submitted_at=now,
        )
        turn.job, turn.segment = request, segment
        turn.job_audio = turn.announced = False
        turn.first_submitted = True
        turn.stitcher.begin_segment()
        self._submissions.append(request)

    def _job_turn(self, job_id: int) -> _Turn | None:
        """The turn a result belongs to; None for results of cancelled jobs."""
        turn = self._turn
        return turn if turn is not None and _is(turn.job, job_id) else None

    def _emit(self, turn: _Turn, audio: Audio) -> None:
        if audio.size == 0:
            return
        if not turn.announced and turn.segment is not None:
            self.outbox.append(
                SegmentStarted(
                    turn_id=turn.id, text=turn.segment.text, start_sample=turn.samples_queued
                )
            )
            turn.spoken.append((turn.samples_queued, turn.segment.text))
            turn.announced = True
        for pcm in frames(to_pcm16(audio), self._frame_samples):
            frame = AudioFrame(turn.id, turn.seq, turn.samples_queued, pcm)
            turn.seq += 1
            turn.samples_queued += frame.samples
            self._outbox_samples += frame.samples
            self._outbox_frames += 1
            self.outbox.append(frame)

    def _finish(self, turn: _Turn, now: float, cancelled: bool, outcome: str) -> None:
        """End a turn whose queued audio still goes out (drained, or stopped by a failure)."""
        self._emit(turn, turn.stitcher.finish())
        self.outbox.append(
            TurnDone(turn_id=turn.id, samples=turn.samples_queued, cancelled=cancelled)
        )
        self.stats.turns.append(outcome)
        self._turn, self._finished = None, turn
        self._last_activity = now  # the idle clock starts when the turn ends
        self._close_if_drained()

    def _drop_queued(self, turn_id: str) -> None:
        """Barge-in: the old turn's unsent audio, segment and word events go; errors stay."""
        kept: deque[Outgoing] = deque()
        for item in self.outbox:
            if isinstance(item, AudioFrame | SegmentStarted | Words) and item.turn_id == turn_id:
                if isinstance(item, AudioFrame):
                    self._outbox_samples -= item.samples
                    self._outbox_frames -= 1
                continue
            kept.append(item)
        self.outbox = kept


def _is(request: Request | None, job_id: int) -> bool:
    return request is not None and request.job_id == job_id
