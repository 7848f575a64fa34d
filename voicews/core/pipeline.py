"""One turn's way from text to sound: text in, segments cut, synthesis asked for, audio
stitched and framed, events out.

The session owns what a socket shares (settings, the outbox, pacing, the job book) and hands
it to each pipeline it starts; a pipeline owns its turn. It cuts the next segment when the
turn can take one, holds a trial first segment until the text confirms it, and ends the turn
by calling ``ended``: cut at once (barge-in, cancel, a limit) or drained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..audio import Audio
from ..errors import ErrorCode, VoicewsError
from ..text.reading import read
from ..text.segmenter import Boundary, Fit, Segment, Urgency, spoken_length
from ..text.urls import speakable
from .config import SessionConfig, Speaking
from .events import AudioFrame, ReplyDelta, TurnDone
from .jobs import GenerationRequest, JobBook, SynthesisRequest
from .outbox import Outbox
from .pacing import Pacing
from .turn import InFlight, Turn, TurnState

RECHECK = 0.05
"""Seconds after which a turn whose cut times have all passed, but which cut nothing (the
queue its urgency read has changed since; waiting for a next word), looks again: with no timer
and no event to come, a closed turn waited with its last sentence in hand."""

_STALL_TOLERANCE = 0.02  # a frame this late after the listener ran dry counts as a stall


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


@dataclass(slots=True)
class Shared:
    """What every pipeline of one session shares with it."""

    config: SessionConfig
    sample_rate: int
    """The engine's."""
    outbox: Outbox
    pacing: Pacing
    jobs: JobBook
    stats: SessionStats
    may_cut: Callable[[TurnPipeline], bool]
    """Whether this pipeline may cut a segment now: the session's contexts take turns."""


Ended = Callable[["TurnPipeline", float, bool, "str | None"], None]
"""Called as a turn ends: (pipeline, now, cancelled, the reply as heard in agent mode)."""


class TurnPipeline:
    def __init__(
        self,
        turn: Turn,
        shared: Shared,
        speaking: Callable[[], Speaking],
        ended: Ended,
        report: Callable[[VoicewsError], None],
    ) -> None:
        """``speaking``: the voice options and reading in force when a segment is asked for."""
        self.turn = turn
        self._shared = shared
        self._speaking = speaking
        self._ended = ended
        self._report = report

    # --- text in --------------------------------------------------------------------------

    def text_delta(self, text: str, now: float) -> None:
        config = self._shared.config
        self.turn.take("text_delta")
        self.turn.check_delta(text, config.max_turn_text_chars, config.max_pending_text_chars)
        self._feed(text, now)

    def end_text(self, now: float) -> None:
        self.turn.take("end_text")
        self.close_text(now)

    def close_text(self, now: float) -> None:
        self.turn.close_text()
        self.pump(now)

    def write(self, request: GenerationRequest) -> None:
        """Agent mode: the model writes this turn's text."""
        self.turn.write(request.job_id)
        self._shared.jobs.submit(request)

    def _feed(self, text: str, now: float) -> None:
        first = self.turn.first_delta is None
        self.turn.feed(text, now)
        if text.strip() or not first:
            self._shared.pacing.arrived(text, now, first)
        self.pump(now)

    # --- results from the compute worker --------------------------------------------------

    def on_audio(self, job_id: int, audio: Audio, now: float, replay: bool = False) -> None:
        """A replay's first audio teaches the pacing nothing: it came at once, for no compute,
        and a session that took it for calm compute would make its next segments otherwise
        (how they end) than the same turn computed."""
        if (job := self._synthesis(job_id)) is None:
            return
        if not job.sounded:
            job.sounded = True
            if not replay:
                spoken = spoken_length(job.segment.text)
                self._shared.pacing.observe(now - job.submitted_at, spoken, job.expected_wait)
        job.samples += audio.size
        if job.trial:
            job.held.append(audio)
            return
        self._shared.outbox.extend(self.turn.track.push(audio))
        self._place_held_words(job)

    def on_words(self, job_id: int, starts: Sequence[int]) -> None:
        """The engine placed the segment's words: tell the client, and keep them, so a cut
        turn's ``heard_text`` ends at the last word that had started playing. Words read
        otherwise are placed as written: each where its spoken form starts."""
        job = self._synthesis(job_id)
        if job is not None and job.reading is not None:
            written = job.reading.written_starts(starts)
            if written is None:
                return  # the engine miscounted: the segment stays one unit
            starts = written
        if job is not None and (job.trial or not job.sounded):
            job.held_words = starts  # placed once it sounds (an engine places them first)
        elif job is not None and (words := self.turn.track.place_words(starts)) is not None:
            self._shared.outbox.append(words)

    def on_text(self, job_id: int, text: str, now: float) -> None:
        """Agent mode: a delta of the reply being generated; it is spoken like client text."""
        turn = self.turn
        if turn.writer != job_id or turn.reply is None:
            return
        turn.reply.append(text)
        self._shared.outbox.append(ReplyDelta(turn_id=turn.id, text=text))
        self._feed(text, now)

    def on_done(self, job_id: int, now: float) -> None:
        if self.turn.writer == job_id:
            self.close_text(now)
        elif (job := self._synthesis(job_id)) is not None:
            job.done = True
            if not job.trial:
                self._synthesized(job, now)

    def on_failed(self, job_id: int, message: str, now: float) -> None:
        turn = self.turn
        if turn.writer == job_id:
            why = f"reply generation failed: {message}"
            self._report(VoicewsError(ErrorCode.GENERATION_FAILED, why, turn.id))
            self.close_text(now)  # speak what was written
        elif self._synthesis(job_id) is not None:
            why = f"synthesis failed: {message}"
            self._report(VoicewsError(ErrorCode.SYNTHESIS_FAILED, why, turn.id))
            turn.in_flight = None
            self._finish(now, "failed")

    def _synthesized(self, job: InFlight, now: float) -> None:
        shared = self._shared
        shared.pacing.heard(spoken_length(job.segment.text), job.samples / shared.sample_rate)
        shared.outbox.extend(self.turn.track.end(job.segment.boundary))
        self.turn.in_flight = None
        self.pump(now)

    def _synthesis(self, job_id: int) -> InFlight | None:
        """The segment a synthesis result belongs to; None for a cancelled job."""
        job = self.turn.in_flight
        return job if job is not None and job.job_id == job_id else None

    # --- audio out ------------------------------------------------------------------------

    def frame_sent(self, frame: AudioFrame, now: float) -> None:
        """A frame of this turn went to the client: it plays for the listener."""
        turn, stats = self.turn, self._shared.stats
        if not turn.listener.started and turn.first_delta is not None:
            stats.first_audio.append(now - turn.first_delta)
        waited = turn.listener.add(frame.samples, now)
        if waited > _STALL_TOLERANCE:
            stats.stalls.append(waited)

    def wakeup_at(self, now: float) -> float:
        """When time alone may next cut a segment, flush text, or end the turn."""
        turn, config = self.turn, self._shared.config
        limit = turn.started + config.max_turn_seconds
        # Time alone cuts no segment while one is out, the outbox is full, or there is no
        # text: only the duration limit can come.
        if turn.in_flight is not None and turn.in_flight.trial:
            return min(limit, turn.last_delta + config.idle_flush_ms / 1000)
        if turn.in_flight or self._shared.outbox.full or not turn.segmenter.has_text:
            return limit
        cuts = self._shared.pacing.cut_times(turn.listener.end, turn.segmenter.next_spoken, now)
        times = [limit, *(t for t in cuts if t > now)]
        if cuts and len(times) == 1:  # every cut time passed, yet no cut: look again soon
            times.append(now + RECHECK)
        if turn.state is not TurnState.CLOSED:  # all the text in: nothing to flush
            times.append(turn.last_delta + config.idle_flush_ms / 1000)
        return min(times)  # with all the text in, a sentence too long to fit waits for one

    # --- the machine ----------------------------------------------------------------------

    def pump(self, now: float) -> None:
        """Submit the next segment if the turn can take one, and end a drained turn."""
        turn = self.turn
        if turn.in_flight is not None and turn.in_flight.trial:
            self._judge(turn.in_flight, now)  # pumps again once the trial is settled
            return
        if turn.in_flight is not None:
            return
        if not self._shared.outbox.full and self._shared.may_cut(self):
            pacing = self._shared.pacing
            first_chars = pacing.first_chars(self._speaking().options.speed)
            urgency, fit = self._urgency(now)
            hold = urgency is Urgency.FIRST and turn.state is not TurnState.CLOSED
            if hold and pacing.holds_start(turn.segmenter.next_spoken):
                return  # text comes slowly: wait for enough in hand to go on from
            segment = turn.segmenter.next_segment(urgency, first_chars, fit, pacing.busy_cap)
            if segment is not None:
                # Computed now, heard once the text rate is known (a token or so later).
                lead = hold and not pacing.rate_known and self._holds_lead(segment)
                self._submit(segment, now, trial=lead, lead=lead)
                return
            if urgency is Urgency.FIRST and pacing.idle:
                trial = turn.segmenter.trial_first(first_chars)
                if trial is not None:
                    self._submit(trial, now, trial=True)
                    return
        if turn.drained:
            self._finish(now, "done")

    def _urgency(self, now: float) -> tuple[Urgency, Fit | None]:
        """How urgent the next cut is, and (for an urgent one) how long it may be."""
        turn, shared = self.turn, self._shared
        idle = turn.idle(now, shared.config.idle_flush_ms / 1000)
        if not turn.first_submitted:
            return (Urgency.FLUSH if idle else Urgency.FIRST), None
        if idle:
            return Urgency.FLUSH, None
        ahead = self._ahead(now)
        urgency = shared.pacing.urgency(ahead, turn.segmenter.next_spoken)
        partial = turn.segmenter.partial_chars
        return urgency, shared.pacing.fit(ahead, urgency is Urgency.CRITICAL, partial)

    def _judge(self, job: InFlight, now: float) -> None:
        """A trial first segment: confirmed by the text since (what it gave goes out), or
        dropped (its job cancelled, its text left to be cut again); undecided, it waits until
        text stops coming (the idle flush). One held for the lead goes out once the lead is
        in hand, the text has ended, or it stops coming."""
        turn, shared = self.turn, self._shared
        idle = turn.idle(now, shared.config.idle_flush_ms / 1000)
        if job.lead:
            if not idle and turn.state is not TurnState.CLOSED and self._holds_lead(job.segment):
                return
            verdict: bool | None = True
        else:
            verdict = turn.segmenter.judge_trial(job.segment)
            if verdict is None and not idle:
                return
            shared.stats.trials.append("confirmed" if verdict else "dropped")
        if not verdict:
            shared.jobs.cancel([job.job_id])
            turn.in_flight, turn.first_submitted = None, False
            self.pump(now)
            return
        job.trial = False
        turn.track.begin(job.segment.text, job.reading.spoken if job.reading else None)
        for audio in job.held:
            shared.outbox.extend(turn.track.push(audio))
        job.held = []
        self._place_held_words(job)
        if job.done:
            self._synthesized(job, now)

    def _place_held_words(self, job: InFlight) -> None:
        """Word starts that came before the segment sounded (or was confirmed), placed now."""
        if job.held_words is not None and (words := self.turn.track.place_words(job.held_words)):
            self._shared.outbox.append(words)
        job.held_words = None

    def _ahead(self, now: float) -> float:
        """Seconds of audio the listener has left: what was sent, and what is still queued
        for the socket (a short first segment's, just made, has not gone out yet)."""
        queued = self._shared.outbox.samples / self.turn.listener.sample_rate
        return self.turn.listener.left(now) + queued

    def _holds_lead(self, segment: Segment) -> bool:
        """A first segment held for the lead waits while the text in hand (the segment's and
        what came after it) is short of the lead (at the rate the text comes, or until that
        is known, at ``SLOW``) and holds no sentence end: the next cut would be a word or two
        of a sentence still coming."""
        segmenter = self.turn.segmenter
        pending = spoken_length(segment.text) + segmenter.next_spoken
        return self._shared.pacing.holds_lead(pending) and not segmenter.sentence_in_hand

    def _submit(
        self, segment: Segment, now: float, trial: bool = False, lead: bool = False
    ) -> None:
        turn, shared, jobs = self.turn, self._shared, self._shared.jobs
        first = not turn.first_submitted
        end = now + self._ahead(now)  # due when the listener runs dry
        speaking = self._speaking()
        options = speaking.options
        # URLs are read shortened to their host and path, one word each still.
        text = speakable(segment.text)
        # Mid-sentence, the engine says the next word too and cuts it off: the segment ends
        # as its sentence goes on, not with a statement's fall. Not a turn's first (its first
        # audio would wait for the word's compute), nor while listeners wait for the worker.
        calm = shared.pacing.calm
        mid = segment.boundary is not Boundary.SENTENCE and not first and calm
        then = turn.segmenter.next_word if mid else ""
        reading = None if speaking.reading is None else read(text, speaking.reading)
        request = SynthesisRequest(
            job_id=jobs.next_id(),
            turn_id=turn.id,
            text=text if reading is None else reading.spoken,
            options=replace(
                options, eager=options.eager or first, lean=options.lean or not calm, then=then
            ),
            first=first,
            deadline=now if first else end,
            submitted_at=now,
        )
        expected = shared.pacing.queue_wait(None if first else end - now)
        turn.in_flight = InFlight(
            request.job_id, segment, now, reading, expected, trial=trial, lead=lead
        )
        turn.first_submitted = True
        if not trial:  # a trial's segment begins once it is confirmed
            turn.track.begin(segment.text, reading.spoken if reading else None)
        jobs.submit(request)

    def cut(self, now: float) -> None:
        """End the turn at once: drop its queued audio, cancel its jobs."""
        turn, shared = self.turn, self._shared
        shared.jobs.cancel(turn.jobs())
        shared.outbox.drop_turn(turn.id)
        heard = turn.heard()
        done = TurnDone(
            turn_id=turn.id,
            samples=turn.listener.received,
            cancelled=True,
            heard_text=heard,
            context_id=turn.context_id,
        )
        shared.outbox.append(done)
        shared.stats.turns.append("cancelled")
        # What the user heard, not what was planned.
        self._ended(self, now, True, heard if turn.reply is not None else None)

    def _finish(self, now: float, outcome: str) -> None:
        """End a turn whose queued audio still goes out: drained, or stopped by a failure."""
        turn, shared = self.turn, self._shared
        shared.jobs.cancel(turn.jobs())
        shared.outbox.extend(turn.track.finish())
        done = outcome == "done"
        reply = None
        if turn.reply is not None:  # all of it, or as much as was spoken
            reply = "".join(turn.reply).strip() if done else turn.track.heard(turn.track.samples)
        shared.outbox.append(
            TurnDone(
                turn_id=turn.id,
                samples=turn.track.samples,
                cancelled=not done,
                context_id=turn.context_id,
            )
        )
        shared.stats.turns.append(outcome)
        self._ended(self, now, False, reply)
