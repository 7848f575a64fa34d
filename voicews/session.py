"""One connection's realtime session as a sans-I/O state machine.

Messages, worker results and sent frames go in with the current time; events and audio frames
(the ``outbox``), worker requests and cancellations come out. No sockets, threads or clocks:
the server moves the bytes, the compute worker runs the requests, tests drive it directly.

Turn lifecycle: ``turn_reset`` -> ``text_delta``* -> ``end_text`` -> drain -> ``turn_done``.
A ``turn_reset`` while a turn is live is a barge-in: its queued audio is dropped, its
synthesis is cancelled, and it ends at once with ``turn_done`` ``cancelled: true``. In agent
mode a ``user_message`` starts a turn whose text a language model writes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import assert_never

from .agent.conversation import AgentConfig, Conversation, Message
from .audio import Audio, StitchConfig
from .cost import Cost
from .encoding import FrameEncoder, OutputFormat
from .engines.base import SynthesisOptions
from .errors import CloseCode, ErrorCode, VoicewsError
from .outbox import Outbox, Outgoing
from .pacing import Pacing
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
    SessionCreated,
    SessionUpdate,
    SessionUpdated,
    TextDelta,
    TurnDone,
    TurnReset,
    TurnStarted,
    UserMessage,
    unknown_voice,
)
from .segmenter import Fit, Segment, SegmenterConfig, Urgency, speakable, spoken_length
from .turn import InFlight, Turn, TurnState

_STALL_TOLERANCE = 0.02  # a frame this late after the listener ran dry counts as a stall


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
    idle_timeout_s: float = 300.0
    """A session with no turn and no message for this long is closed."""
    max_turn_seconds: float = 600.0
    """A turn still live this long after its ``turn_reset`` is cut."""
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    stitch: StitchConfig = field(default_factory=StitchConfig)
    agent: AgentConfig | None = None
    voices: tuple[str, ...] = ()
    """The engine's voices (``engines.engine_voices``), the default first."""

    def limits(self, max_sessions: int) -> Limits:
        """What a session enforces, and what its server admits (``max_sessions``)."""
        return Limits(
            max_message_bytes=self.max_message_bytes,
            max_turn_text_chars=self.max_turn_text_chars,
            max_pending_text_chars=self.max_pending_text_chars,
            max_pending_audio_ms=self.max_pending_audio_ms,
            max_messages_per_second=self.max_messages_per_second,
            max_sessions=max_sessions,
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
    trials: list[str] = field(default_factory=list)
    """How each trial of a turn's first words ended: confirmed, dropped."""


@dataclass(frozen=True, slots=True)
class Close:
    """The session asks its connection to close once the outbox is sent."""

    code: CloseCode
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
    messages: tuple[Message, ...]
    config: AgentConfig


Request = SynthesisRequest | GenerationRequest


class Session:
    def __init__(
        self,
        session_id: str,
        sample_rate: int,
        config: SessionConfig,
        audio: OutputFormat | None = None,
    ) -> None:
        """``sample_rate`` is the engine's; ``audio`` what the frames carry (default: PCM16
        at the engine's rate)."""
        self.id = session_id
        self.config = config
        self.sample_rate = sample_rate
        self.audio = audio or OutputFormat(sample_rate)
        """The output format of turns started from now on."""
        self.outbox = Outbox(high=self._pending_limit(self.audio.sample_rate))
        """What to send, in order; a frame taken from it goes back in through ``sent``."""
        self.close_request: Close | None = None
        self.stats = SessionStats()
        self._options = SynthesisOptions()
        self._pacing = Pacing(config.stall_guard_ms, config.segmenter.max_chars)
        self._conversation = Conversation(config.agent) if config.agent else None
        self._turn: Turn | None = None
        self._finished: Turn | None = None  # ended, but its last frames may still be queued
        self._last_turn_id: str | None = None
        self._job_ids = itertools.count(1)
        self._reply_ids = itertools.count(1)
        self._submissions: list[Request] = []
        self._cancellations: list[int] = []
        self._bucket = float(config.max_messages_per_second)
        self._bucket_at: float | None = None
        self._last_activity = 0.0
        self._draining = False

    # --- inputs ---------------------------------------------------------------------------

    def created(self, max_sessions: int) -> SessionCreated:
        return SessionCreated(
            session_id=self.id,
            audio=self._audio_format(),
            limits=self.config.limits(max_sessions),
            voices=list(self.config.voices) or None,
        )

    def start(self, now: float) -> None:
        """The connection is open: the idle clock starts now."""
        self._last_activity = now

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

    def handle(self, message: ClientMessage, now: float) -> None:
        """Apply one client message; a refusal becomes an ``error`` event in the outbox."""
        try:
            match message:
                case TurnReset():
                    self._turn_reset(message.turn_id, now)
                case TextDelta():
                    self._text_delta(message.text, now)
                case EndText():
                    self._close_text(self._open_turn("end_text"), now)
                case Cancel():
                    if self._turn is None:
                        raise VoicewsError(ErrorCode.NO_ACTIVE_TURN, "cancel: no live turn")
                    self._cut(self._turn, now)
                case SessionUpdate():
                    self._update(message)
                case UserMessage():
                    self._user_message(message.text, message.turn_id, now)
                case Playback():
                    self._playback(message.turn_id, message.samples_played)
                case Ping():
                    # In order with everything else: a pong also shows what is still queued.
                    self.outbox.append(Pong(id=message.id))
                case _:
                    assert_never(message)
        except VoicewsError as exc:
            self.report(exc)

    def report(self, exc: VoicewsError) -> None:
        self.stats.errors.append(exc.code)
        self.outbox.append(Error(code=exc.code, message=exc.message, turn_id=exc.turn_id))

    def on_audio(self, job_id: int, audio: Audio, now: float) -> None:
        if (found := self._synthesis(job_id)) is None:
            return
        turn, job = found
        if not job.sounded:
            job.sounded = True
            self._pacing.observe(now - job.submitted_at, spoken_length(job.segment.text))
        job.samples += audio.size
        if job.trial:
            job.held.append(audio)
        else:
            self.outbox.extend(turn.track.push(audio))

    def on_words(self, job_id: int, starts: Sequence[int]) -> None:
        """The engine placed the segment's words: tell the client, and keep them, so a cut
        turn's ``heard_text`` ends at the last word that had started playing."""
        found = self._synthesis(job_id)
        if found is not None and found[1].trial:
            found[1].held_words = starts
        elif found is not None and (words := found[0].track.place_words(starts)) is not None:
            self.outbox.append(words)

    def on_text(self, job_id: int, text: str, now: float) -> None:
        """Agent mode: a delta of the reply being generated; it is spoken like client text."""
        turn = self._writing(job_id)
        if turn is None or turn.reply is None:
            return
        turn.reply.append(text)
        self.outbox.append(ReplyDelta(turn_id=turn.id, text=text))
        self._feed(turn, text, now)

    def on_done(self, job_id: int, now: float) -> None:
        if (writing := self._writing(job_id)) is not None:
            self._close_text(writing, now)
        elif (found := self._synthesis(job_id)) is not None:
            turn, job = found
            job.done = True
            if not job.trial:
                self._synthesized(turn, job, now)

    def _synthesized(self, turn: Turn, job: InFlight, now: float) -> None:
        self._pacing.heard(spoken_length(job.segment.text), job.samples / self.sample_rate)
        self.outbox.extend(turn.track.end(job.segment.boundary))
        turn.in_flight = None
        self._pump(now)

    def on_failed(self, job_id: int, message: str, now: float) -> None:
        if (writing := self._writing(job_id)) is not None:
            why = f"reply generation failed: {message}"
            self.report(VoicewsError(ErrorCode.GENERATION_FAILED, why, writing.id))
            self._close_text(writing, now)  # speak what was written
        elif (found := self._synthesis(job_id)) is not None:
            turn, _ = found
            why = f"synthesis failed: {message}"
            self.report(VoicewsError(ErrorCode.SYNTHESIS_FAILED, why, turn.id))
            turn.in_flight = None
            self._finish(turn, now, "failed")

    def sent(self, item: Outgoing, now: float) -> None:
        """``item``, taken from the outbox, goes to the client now. A frame plays for the
        listener, and the room it frees may let the next segment go (``take_submissions``)."""
        if not isinstance(item, AudioFrame):
            return
        turn = self._turn if self._turn is not None else self._finished
        if turn is not None and turn.id == item.turn_id:
            if not turn.listener.started and turn.first_delta is not None:
                self.stats.first_audio.append(now - turn.first_delta)
            waited = turn.listener.add(item.samples, now)
            if waited > _STALL_TOLERANCE:
                self.stats.stalls.append(waited)
        self._pump(now)

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
            self.close_request = Close(CloseCode.NORMAL_CLOSURE, "idle timeout")
        self._pump(now)

    def load(self, wait: float, cost: Cost, idle: bool = False, backlog: float = 0.0) -> None:
        """The compute worker lately: segments wait ``wait`` seconds for it (keep that much
        more audio in hand), a segment's first audio costs the engine ``cost``, it is ``idle``
        now (a clause may go while the listener has audio in hand), and a first segment asked
        for now would wait ``backlog`` seconds (it holds more)."""
        self._pacing.engine(cost, wait, idle, backlog)

    def drain(self, now: float) -> None:
        """Server shutdown: finish the current turn, start no new one, then close."""
        self._draining = True
        self._pump(now)

    def close(self) -> None:
        """The connection is gone: cancel the worker's jobs and drop everything queued."""
        if self._turn is not None:
            self._cancellations += self._turn.jobs()
        self._turn = None
        self.outbox.clear()

    # --- outputs (and the outbox) ---------------------------------------------------------

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
        # Time alone cuts no segment while one is out, the outbox is full, or there is no
        # text: only the duration limit can come.
        if turn.in_flight is not None and turn.in_flight.trial:
            return min(limit, turn.last_delta + self.config.idle_flush_ms / 1000)
        if turn.in_flight or self.outbox.full or not turn.segmenter.has_text:
            return limit
        cuts = self._pacing.cut_times(turn.listener.end, turn.segmenter.next_spoken)
        times = [limit, *(t for t in cuts if t > now)]
        if turn.state is not TurnState.CLOSED:  # all the text in: nothing to flush
            times.append(turn.last_delta + self.config.idle_flush_ms / 1000)
        return min(times)  # with all the text in, a sentence too long to fit waits for one

    @property
    def pending_audio_s(self) -> float:
        """Seconds of audio waiting for the socket, at the output rate of its turn."""
        turn = self._turn if self._turn is not None else self._finished
        rate = turn.listener.sample_rate if turn is not None else self.audio.sample_rate
        return self.outbox.samples / rate

    @property
    def synthesizing(self) -> bool:
        """A segment of this session is with the compute worker."""
        return self._turn is not None and self._turn.in_flight is not None

    @property
    def history(self) -> list[Message]:
        """Agent mode: the conversation so far, each reply as far as it was heard."""
        return list(self._conversation.history) if self._conversation else []

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
        config = self.config
        # The turn's own encoder: a format change applies from the next turn.
        encoder = FrameEncoder(self.sample_rate, self.audio, config.frame_ms)
        self._turn = Turn(turn_id, now, self.sample_rate, encoder, config.segmenter, config.stitch)
        # Queued frames of a finished turn at another rate count at this one's: a soft bound.
        self.outbox.high = self._pending_limit(encoder.sample_rate)
        self.outbox.append(TurnStarted(turn_id=turn_id))

    def _update(self, message: SessionUpdate) -> None:
        """Voice options apply from the next segment, the audio format from the next turn;
        a refused update changes nothing."""
        if message.voice is not None and message.voice not in self.config.voices:
            raise unknown_voice(message.voice, self.config.voices)
        audio = self.audio
        if message.audio is not None:
            try:
                audio = audio.updated(message.audio.sample_rate, message.audio.format)
            except ValueError as exc:
                raise VoicewsError(ErrorCode.INVALID_MESSAGE, str(exc)) from None
        changes = message.model_dump(exclude={"type", "audio"}, exclude_none=True)
        self._options = replace(self._options, **changes)
        self.audio = audio
        live = self._turn.id if self._turn is not None else None
        self.outbox.append(
            SessionUpdated(
                audio=self._audio_format(),
                speed=self._options.speed,
                voice=self._options.voice or next(iter(self.config.voices), None),
                live_turn_id=live,
            )
        )

    def _audio_format(self) -> AudioFormat:
        return AudioFormat(sample_rate=self.audio.sample_rate, format=self.audio.format)

    def _pending_limit(self, rate: int) -> int:
        """Samples of queued audio at ``rate`` that pause synthesis."""
        return rate * self.config.max_pending_audio_ms // 1000

    def _user_message(self, text: str, turn_id: str | None, now: float) -> None:
        conversation = self._conversation
        if conversation is None:
            raise VoicewsError(
                ErrorCode.AGENT_UNAVAILABLE,
                "user_message needs a server started with --agent-model; send text_delta",
            )
        self._turn_reset(turn_id or f"reply-{next(self._reply_ids)}", now)
        assert self._turn is not None
        conversation.user(text)
        request = GenerationRequest(
            job_id=next(self._job_ids),
            turn_id=self._turn.id,
            messages=tuple(conversation.prompt()),
            config=conversation.config,
        )
        self._turn.write(request.job_id)
        self._submissions.append(request)

    def _text_delta(self, text: str, now: float) -> None:
        turn = self._open_turn("text_delta")
        turn.check_delta(text, self.config.max_turn_text_chars, self.config.max_pending_text_chars)
        self._feed(turn, text, now)

    def _feed(self, turn: Turn, text: str, now: float) -> None:
        turn.feed(text, now)
        self._pump(now)

    def _close_text(self, turn: Turn, now: float) -> None:
        turn.close_text()
        self._pump(now)

    def _playback(self, turn_id: str, samples_played: int) -> None:
        turn = self._turn
        if turn is not None and turn.id == turn_id:  # else a finished turn: nothing to decide
            turn.played(samples_played)

    def _open_turn(self, what: str) -> Turn:
        """The turn a client message about text is for; refused if there is none open."""
        turn = self._turn
        if turn is None:
            last = self._last_turn_id
            hint = f"turn {last!r} is done" if last else "no turn was started"
            raise VoicewsError(
                ErrorCode.NO_ACTIVE_TURN, f"{what} refused: {hint}; send turn_reset first"
            )
        turn.take(what)
        return turn

    def _pump(self, now: float) -> None:
        """Submit the next segment if the turn can take one, and end a drained turn."""
        turn = self._turn
        if turn is None:
            self._close_if_drained()
            return
        if turn.in_flight is not None and turn.in_flight.trial:
            self._judge(turn, turn.in_flight, now)  # pumps again once the trial is settled
            return
        if turn.in_flight is not None:
            return
        if not self.outbox.full:
            first_chars = self._pacing.first_chars(self._options.speed)
            urgency, fit = self._urgency(turn, now)
            segment = turn.segmenter.next_segment(urgency, first_chars, fit)
            if segment is not None:
                self._submit(turn, segment, now)
                return
            if urgency is Urgency.FIRST and self._pacing.idle:
                trial = turn.segmenter.trial_first(first_chars)
                if trial is not None:
                    self._submit(turn, trial, now, trial=True)
                    return
        if turn.drained:
            self._finish(turn, now, "done")

    def _urgency(self, turn: Turn, now: float) -> tuple[Urgency, Fit | None]:
        """How urgent the next cut is, and (for an urgent one) how long it may be."""
        idle = turn.idle(now, self.config.idle_flush_ms / 1000)
        if not turn.first_submitted:
            return (Urgency.FLUSH if idle else Urgency.FIRST), None
        if idle:
            return Urgency.FLUSH, None
        ahead = turn.listener.left(now) + self.outbox.samples / turn.listener.sample_rate
        urgency = self._pacing.urgency(ahead, turn.segmenter.next_spoken)
        return urgency, self._pacing.fit(ahead, urgency is Urgency.CRITICAL)

    def _judge(self, turn: Turn, job: InFlight, now: float) -> None:
        """A trial first segment: confirmed by the text since (what it gave goes out), or
        dropped (its job cancelled, its text left to be cut again); undecided, it waits until
        text stops coming (the idle flush)."""
        verdict = turn.segmenter.judge_trial(job.segment)
        if verdict is None and not turn.idle(now, self.config.idle_flush_ms / 1000):
            return
        self.stats.trials.append("confirmed" if verdict else "dropped")
        if not verdict:
            self._cancellations.append(job.job_id)
            turn.in_flight, turn.first_submitted = None, False
            self._pump(now)
            return
        job.trial = False
        turn.track.begin(job.segment.text)
        for audio in job.held:
            self.outbox.extend(turn.track.push(audio))
        job.held = []
        if job.held_words is not None and (words := turn.track.place_words(job.held_words)):
            self.outbox.append(words)
        if job.done:
            self._synthesized(turn, job, now)

    def _submit(self, turn: Turn, segment: Segment, now: float, trial: bool = False) -> None:
        first = not turn.first_submitted
        end = turn.listener.end
        request = SynthesisRequest(
            job_id=next(self._job_ids),
            turn_id=turn.id,
            text=speakable(segment.text),  # URLs shortened, one word each still
            options=replace(self._options, eager=True) if first else self._options,
            first=first,
            deadline=now if first or end is None else end,
            submitted_at=now,
        )
        turn.in_flight = InFlight(request.job_id, segment, now, trial=trial)
        turn.first_submitted = True
        if not trial:  # a trial's segment begins once it is confirmed
            turn.track.begin(segment.text)
        self._submissions.append(request)

    def _synthesis(self, job_id: int) -> tuple[Turn, InFlight] | None:
        """The turn and segment a synthesis result belongs to; None for a cancelled job."""
        turn = self._turn
        job = turn.in_flight if turn is not None else None
        return (turn, job) if turn and job and job.job_id == job_id else None

    def _writing(self, job_id: int) -> Turn | None:
        """The turn whose text ``job_id`` writes; None for a cancelled generation."""
        turn = self._turn
        return turn if turn is not None and turn.writer == job_id else None

    def _cut(self, turn: Turn, now: float) -> None:
        """End a live turn at once: drop its queued audio, cancel its jobs."""
        self._cancellations += turn.jobs()
        self.outbox.drop_turn(turn.id)
        heard = turn.heard()
        self._remember_reply(turn, heard)  # what the user heard, not what was planned
        done = TurnDone(
            turn_id=turn.id, samples=turn.listener.received, cancelled=True, heard_text=heard
        )
        self.outbox.append(done)
        self.stats.turns.append("cancelled")
        self._turn = None
        self._last_activity = now

    def _finish(self, turn: Turn, now: float, outcome: str) -> None:
        """End a turn whose queued audio still goes out: drained, or stopped by a failure."""
        self._cancellations += turn.jobs()
        self.outbox.extend(turn.track.finish())
        done = outcome == "done"
        if turn.reply is not None:  # all of it, or as much as was spoken
            spoken = turn.track.heard(turn.track.samples)
            self._remember_reply(turn, "".join(turn.reply).strip() if done else spoken)
        self.outbox.append(
            TurnDone(turn_id=turn.id, samples=turn.track.samples, cancelled=not done)
        )
        self.stats.turns.append(outcome)
        self._turn, self._finished = None, turn
        self._last_activity = now  # the idle clock starts when the turn ends
        self._close_if_drained()

    def _remember_reply(self, turn: Turn, heard: str) -> None:
        if turn.reply is not None and self._conversation is not None:
            self._conversation.assistant(heard)

    def _close_if_drained(self) -> None:
        if self._draining and self._turn is None and self.close_request is None:
            self.close_request = Close(CloseCode.GOING_AWAY, "server shutting down")
