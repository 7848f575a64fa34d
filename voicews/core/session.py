"""One connection's realtime session as a sans-I/O state machine, in no wire format.

Commands (start a turn, text, end of text, settings...), worker results and sent frames go in
with the current time; events and audio frames (the ``outbox``), worker requests and
cancellations come out. No sockets, threads or clocks: a dialect translates its wire into
these calls and renders the events, the driver runs the requests, tests drive it directly.

The session owns what the socket shares: settings, the outbox, pacing, the rate limit, the
idle clock. Each turn runs in its own :class:`~voicews.core.pipeline.TurnPipeline`.

Contexts: a socket may hold several turns at once, each in a context named by the client
(``context_id``); without one, a command is for the socket's one unnamed context, which is the
whole protocol a client that names none sees. Contexts take turns at the engine: one segment
at a time, the context whose unspoken text came first going first, so a context's audio never
falls inside another's segment. Closing a context (or leaving it idle) drops its queued work.
Turn lifecycle: ``turn_reset`` -> ``text_delta``* -> ``end_text`` -> drain -> ``turn_done``.
A ``turn_reset`` while a turn is live is a barge-in: its queued audio is dropped, its
synthesis is cancelled, and it ends at once with ``turn_done`` ``cancelled: true``. In agent
mode a ``user_message`` starts a turn whose text a language model writes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from ..audio import Audio
from ..encoding import FrameEncoder, OutputFormat
from ..errors import CloseCode, ErrorCode, VoicewsError
from .config import SessionConfig, SettingsUpdate
from .contexts import Context, Contexts
from .conversation import Conversation, Message
from .events import (
    AudioFrame,
    Close,
    ContextClosed,
    ContextCloseReason,
    Error,
    Outgoing,
    Pong,
    SessionUpdated,
    TurnStarted,
)
from .jobs import GenerationRequest, JobBook, Request
from .outbox import Outbox
from .pacing import Load, Pacing
from .pipeline import SessionStats, Shared, TurnPipeline
from .rate import TokenBucket
from .settings import Settings
from .turn import Turn


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
        self._settings = Settings(config, audio or OutputFormat(sample_rate))
        self.outbox = Outbox(high=self._pending_limit(self.audio.sample_rate))
        """What to send, in order; a frame taken from it goes back in through ``sent``."""
        self.close_request: Close | None = None
        self.stats = SessionStats()
        self._jobs = JobBook()
        self._shared = Shared(
            config,
            sample_rate,
            self.outbox,
            Pacing(config.stall_guard_ms, config.segmenter.max_chars),
            self._jobs,
            self.stats,
            lambda pipeline: self._contexts.may_cut(pipeline),
        )
        self._conversation = Conversation(config.agent) if config.agent else None
        self._contexts = Contexts(config.max_contexts)
        self._reply_ids = itertools.count(1)
        self._bucket = TokenBucket(config.max_messages_per_second)
        self._last_activity = 0.0
        self._draining = False

    @property
    def audio(self) -> OutputFormat:
        """The output format of turns started from now on."""
        return self._settings.audio

    @audio.setter
    def audio(self, audio: OutputFormat) -> None:
        self._settings.audio = audio

    # --- the connection -------------------------------------------------------------------

    def start(self, now: float) -> None:
        """The connection is open: the idle clock starts now."""
        self._last_activity = now

    def admit(self, now: float) -> bool:
        """Count one client frame against the rate limit; False (and an error) if over it."""
        self._last_activity = now
        if self._bucket.take(now):
            return True
        self.report(
            VoicewsError(
                ErrorCode.RATE_LIMITED,
                f"more than {self._bucket.rate} messages per second; message refused",
                self._live.turn.id if self._live else None,
            )
        )
        return False

    def report(self, exc: VoicewsError, context_id: str | None = None) -> None:
        self.stats.errors.append(exc.code)
        self.outbox.append(
            Error(code=exc.code, message=exc.message, turn_id=exc.turn_id, context_id=context_id)
        )

    @contextmanager
    def _refusals(self, context_id: str | None = None) -> Iterator[None]:
        """A command the session refuses becomes an ``error`` event; nothing else changes."""
        try:
            yield
        except VoicewsError as exc:
            self.report(exc, context_id)

    # --- commands -------------------------------------------------------------------------

    def turn_reset(self, turn_id: str, now: float, context_id: str | None = None) -> None:
        """Start a turn in ``context_id`` (opened by it, if new), cutting the one live there."""
        with self._refusals(context_id):
            self._turn_reset(turn_id, now, context_id)

    def text_delta(self, text: str, now: float, context_id: str | None = None) -> None:
        with self._refusals(context_id):
            pipeline = self._open("text_delta", context_id, now)
            if not pipeline.turn.segmenter.has_text:
                self._contexts.queued(context_id)
            pipeline.text_delta(text, now)

    def end_text(self, now: float, context_id: str | None = None) -> None:
        with self._refusals(context_id):
            self._open("end_text", context_id, now).end_text(now)

    def close_context(self, context_id: str, now: float) -> None:
        """Close a context at once: its live turn is cut, its queued audio dropped."""
        with self._refusals(context_id):
            if self._contexts.get(context_id) is None:
                raise VoicewsError(
                    ErrorCode.NO_ACTIVE_TURN, f"close_context: no open context {context_id!r}"
                )
            self._close_context(context_id, "closed", now)

    def cancel(self, now: float) -> None:
        with self._refusals():
            if self._live is None:
                raise VoicewsError(ErrorCode.NO_ACTIVE_TURN, "cancel: no live turn")
            self._live.cut(now)

    def update(self, changes: SettingsUpdate) -> None:
        """Voice options apply from the next segment, the audio format from the next turn;
        a refused update changes nothing."""
        with self._refusals():
            self._update(changes)

    def user_message(self, text: str, turn_id: str | None, now: float) -> None:
        with self._refusals():
            self._user_message(text, turn_id, now)

    def playback(self, turn_id: str, samples_played: int) -> None:
        for context in self._contexts:
            live = context.live
            if live is not None and live.turn.id == turn_id:  # else finished: nothing to do
                live.turn.played(samples_played)

    def ping(self, ping_id: str | None) -> None:
        # In order with everything else: a pong also shows what is still queued.
        self.outbox.append(Pong(id=ping_id))

    # --- results from the compute worker --------------------------------------------------

    def on_audio(self, job_id: int, audio: Audio, now: float, replay: bool = False) -> None:
        """``replay``: given again from the worker's phrase cache, at once."""
        if (pipeline := self._contexts.running(job_id)) is not None:
            pipeline.on_audio(job_id, audio, now, replay)

    def on_words(self, job_id: int, starts: Sequence[int]) -> None:
        if (pipeline := self._contexts.running(job_id)) is not None:
            pipeline.on_words(job_id, starts)

    def on_text(self, job_id: int, text: str, now: float) -> None:
        if (pipeline := self._contexts.running(job_id)) is not None:
            pipeline.on_text(job_id, text, now)

    def on_done(self, job_id: int, now: float) -> None:
        if (pipeline := self._contexts.running(job_id)) is not None:
            pipeline.on_done(job_id, now)
            self._pump(now)  # the engine is free: another context's segment may go

    def on_failed(self, job_id: int, message: str, now: float) -> None:
        if (pipeline := self._contexts.running(job_id)) is not None:
            pipeline.on_failed(job_id, message, now)
            self._pump(now)

    # --- time and the outbox --------------------------------------------------------------

    def sent(self, item: Outgoing, now: float) -> None:
        """``item``, taken from the outbox, goes to the client now. A frame plays for the
        listener, and the room it frees may let the next segment go (``take_submissions``)."""
        if not isinstance(item, AudioFrame):
            return
        context = self._contexts.get(item.context_id)
        for pipeline in (context.live, context.finished) if context else ():
            if pipeline is not None and pipeline.turn.id == item.turn_id:
                pipeline.frame_sent(item, now)
        self._pump(now)

    def tick(self, now: float) -> None:
        """Time passed: flush, stall-guard, turn-duration or idle deadlines may have come."""
        for key, context in self._contexts.items():
            live = context.live
            if live is not None and now - live.turn.started >= self.config.max_turn_seconds:
                turn_id = live.turn.id
                self.report(
                    VoicewsError(
                        ErrorCode.TURN_DURATION_EXCEEDED,
                        f"turn {turn_id!r} ran over {self.config.max_turn_seconds:g} s; cut",
                        turn_id,
                    ),
                    key,
                )
                live.cut(now)
            elif key is not None and now >= (self._idle_at(context) or math.inf):
                self._close_context(key, "idle_timeout", now)
        if (
            not self._contexts.any_live
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

    def load(self, load: Load) -> None:
        """The compute worker lately (``Load``): segments wait for it (keep that much more
        audio in hand), a segment's first audio costs the engine so much, it is idle now (a
        clause may go while the listener has audio in hand), a first segment asked for now
        would wait its backlog (it holds more), and a later one waits for its queue as far
        as it is due before it."""
        self._shared.pacing.engine(load)

    def drain(self, now: float) -> None:
        """Server shutdown: finish the current turn, start no new one, then close."""
        self._draining = True
        self._pump(now)

    def close(self) -> None:
        """The connection is gone: cancel the worker's jobs and drop everything queued."""
        for context in self._contexts:
            if context.live is not None:
                self._jobs.cancel(context.live.turn.jobs())
            context.live = None
        self.outbox.clear()

    def take_submissions(self) -> list[Request]:
        return self._jobs.take_submissions()

    def take_cancellations(self) -> list[int]:
        return self._jobs.take_cancellations()

    def wakeup_at(self, now: float) -> float | None:
        """When ``tick`` should next be called, if nothing else happens first."""
        times = [at for context in self._contexts if (at := self._idle_at(context)) is not None]
        times += [c.live.wakeup_at(now) for c in self._contexts if c.live is not None]
        if not self._contexts.any_live and self.close_request is None:
            times.append(self._last_activity + self.config.idle_timeout_s)
        return min(times, default=None)

    @property
    def pending_audio_s(self) -> float:
        """Seconds of audio waiting for the socket, at the output rate of its turn."""
        unnamed = self._contexts.unnamed
        pipeline = unnamed.live if unnamed.live is not None else unnamed.finished
        rate = pipeline.turn.listener.sample_rate if pipeline else self.audio.sample_rate
        return self.outbox.samples / rate

    @property
    def synthesizing(self) -> bool:
        """A segment of this session is with the compute worker."""
        return self._contexts.synthesizing

    @property
    def history(self) -> list[Message]:
        """Agent mode: the conversation so far, each reply as far as it was heard."""
        return list(self._conversation.history) if self._conversation else []

    # --- the machine ----------------------------------------------------------------------

    def _turn_reset(self, turn_id: str, now: float, context_id: str | None = None) -> TurnPipeline:
        if self._draining:
            raise VoicewsError(
                ErrorCode.SHUTTING_DOWN, "the server is shutting down; no new turns", turn_id
            )
        context = self._contexts.for_turn(context_id, turn_id)
        if context.live is not None:
            context.live.cut(now)
        context.last_turn_id, context.last_message = turn_id, now
        config = self.config
        # The turn's own encoder: a format change applies from the next turn.
        encoder = FrameEncoder(self.sample_rate, self.audio, config.frame_ms)
        turn = Turn(
            turn_id, now, self.sample_rate, encoder, config.segmenter, config.stitch, context_id
        )
        context.live = TurnPipeline(
            turn,
            self._shared,
            self._settings.speaking,
            partial(self._ended, context),
            partial(self.report, context_id=context_id),
        )
        # Queued frames of a finished turn at another rate count at this one's: a soft bound.
        self.outbox.high = self._pending_limit(encoder.sample_rate)
        self.outbox.append(TurnStarted(turn_id=turn_id, context_id=context_id))
        return context.live

    def _close_context(self, context_id: str, reason: ContextCloseReason, now: float) -> None:
        context = self._contexts.pop(context_id)
        if context.live is not None:
            context.live.cut(now)
        if context.finished is not None:
            self.outbox.drop_turn(context.finished.turn.id)
        self.outbox.append(ContextClosed(context_id=context_id, reason=reason))
        self._pump(now)

    def _idle_at(self, context: Context) -> float | None:
        return self._contexts.idle_at(context, self._settings.context_idle_s)

    @property
    def _live(self) -> TurnPipeline | None:
        """The unnamed context's live turn: the one turn of a client that names no context."""
        return self._contexts.unnamed.live

    def _update(self, changes: SettingsUpdate) -> None:
        settings = self._settings
        settings.update(changes)
        self.outbox.append(
            SessionUpdated(
                audio=settings.audio,
                speed=settings.options.speed,
                normalization=settings.normalization,
                locale=settings.reading.locale,
                voice=settings.voice,
                live_turn_id=self._live.turn.id if self._live is not None else None,
                context_idle_s=changes.context_idle_s,
            )
        )

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
        pipeline = self._turn_reset(turn_id or f"reply-{next(self._reply_ids)}", now)
        conversation.user(text)
        pipeline.write(
            GenerationRequest(
                job_id=self._jobs.next_id(),
                turn_id=pipeline.turn.id,
                messages=tuple(conversation.prompt()),
                config=conversation.config,
            )
        )

    def _open(self, what: str, context_id: str | None, now: float) -> TurnPipeline:
        """The turn a client message about text is for; refused if there is none open."""
        context = self._contexts.get(context_id)
        if context is None or context.live is None:
            last = context.last_turn_id if context else None
            hint = f"turn {last!r} is done" if last else "no turn was started"
            if context_id is not None:
                hint += f" in context {context_id!r}"
            raise VoicewsError(
                ErrorCode.NO_ACTIVE_TURN, f"{what} refused: {hint}; send turn_reset first"
            )
        context.last_message = now
        return context.live

    def _pump(self, now: float) -> None:
        live = self._contexts.by_arrival()
        for context in live:
            if context.live is not None:  # an earlier one's end may not have ended it
                context.live.pump(now)
        if not live:
            self._close_if_drained()

    def _ended(
        self,
        context: Context,
        pipeline: TurnPipeline,
        now: float,
        cancelled: bool,
        reply: str | None,
    ) -> None:
        """A turn ended: cut (its frames are gone) or finished (they still go out)."""
        if reply is not None and self._conversation is not None:
            self._conversation.assistant(reply)
        context.live = None
        if not cancelled:
            context.finished = pipeline
        self._last_activity = context.last_message = now  # idle clocks start as a turn ends
        if not cancelled:
            self._close_if_drained()

    def _close_if_drained(self) -> None:
        if self._draining and not self._contexts.any_live and self.close_request is None:
            self.close_request = Close(CloseCode.GOING_AWAY, "server shutting down")
