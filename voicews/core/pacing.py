"""How urgent a turn's next segment is, and how long it may be: the listener's audio left,
against what synthesizing the next segment will take.

While the listener has plenty ahead, the segmenter waits for natural, longer segments; as the
audio left nears what synthesizing the pending text is expected to take (the engine's cost,
fixed plus per character, as the compute worker measures it, plus what segments wait for the
worker lately, plus a margin), it cuts at a clause, then at any word: the longest piece whose
synthesis still fits in the audio left, and never one so short that it gives less audio than
it costs. An engine slower than real time stalls the listener however the text is cut; there
the segments stay whole sentences, so the stalls are as few as can be and fall between them.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import accumulate

from ..text.segmenter import Fit, Urgency
from .arrival import Arrival, Rates
from .cost import DEFAULT_PRIOR, Cost

# A timer set for a cut time finds the audio left equal to the guard give or take a rounding
# (or fires a hair early): it still counts, or the cut would wait for the next text to come.
_SLACK = 0.001
_CHARS_PER_SECOND = 15.0  # English speech at speed 1, about, until heard
LEAD_CHARS = 48
"""Written characters a turn's text in hand should last while they arrive: eight or nine words,
or a price streamed a digit a token. A later cut then finds a phrase waiting."""
FIRST_AUDIO = 0.4
"""Seconds a first clause ("Sure,") plays: the text arriving meanwhile counts toward the lead,
so at 20 tokens a second (four times as fast as it is spoken) it starts at once, as it did
without a lead."""
WORD_CHARS = 6  # a word and the space after it, about
LONE_WAIT = 0.15
"""Seconds of silence worth risking for the next word rather than cutting a lone one."""
CALM_WAIT = 0.05
"""Seconds of queue wait under which the worker has compute to spare (see ``calm``): a burst of
16 conversations, which the next word's compute cost 8% more CPU per second of audio, is not."""
SLOW = Rates(written=20.0, spoken=20.0)
"""Five tokens a second of four characters: the slowest text a first segment asked for before
the rate is known is held for (``holds_lead``); with less in hand than its lead."""
BUSY_JOB = 0.2
"""Seconds of compute a later segment should take at most while segments wait for the worker
(``busy_cap``): Piper's 40-47 characters as fitted in a burst of 16, a clause or two. A burst
of 16 at 20 tokens a second, 6 bursts a run, two runs: conversations stalled over 100 ms 23
and 13 of 96 against 30 and 25 uncapped, the longest stall 328 and 172 against 325 and 210 ms
(``python -m bench continuity --burst 16``)."""
BUSY_LEAST = 24
"""Spoken characters under which a busy cap is no phrase (four words or so): none then."""
WORD_SLACK = 0.05
"""Seconds of compute a critical cut may take past what fits for a second word, rather than
say the first alone ("check that | for you", not "check | that for you"): eaten out of the
critical margin (two thirds of ``stall_guard_ms``), not heard as silence."""
HORIZON = 6.0
"""Seconds of speech ahead over which text arriving slower than it is spoken is made up by
starting later (a reply's rest is not known; this is a typical one)."""


Queue = tuple[tuple[float, float], ...]
"""Segments queued for the compute worker, due first first: when each is due (seconds from
when it was read) and its compute over the lanes (``Load.queue``)."""


def waits(queue: Iterable[tuple[float, float]], due: float) -> float:
    """Seconds a segment due ``due`` seconds from now waits in ``queue``: the compute of those
    due before it (the job due first runs next), or with it, give or take a rounding."""
    return sum(seconds for at, seconds in queue if at <= due + _SLACK)


@dataclass(frozen=True, slots=True)
class Load:
    """The worker as a session paces itself by it (``ComputeWorker.load``)."""

    wait: float
    """Seconds segments wait in the queue lately (``ComputeWorker.queue_wait``)."""
    cost: Cost
    """A segment's compute to its first audio, as fitted."""
    idle: bool = False
    """A job submitted now would start at once."""
    backlog: float = 0.0
    """Seconds a first segment asked for now would wait: the compute of the queued segments
    due before it, over the lanes."""
    queue: Queue = ()
    """The queued segments, due first first: when each is due (seconds from now) and its
    compute over the lanes. A segment due in ``t`` waits for those due before it (the job
    due first runs next), not for what segments waited lately: sessions that counted the
    waits of segments due long after theirs all ran short at once, cut their shortest
    pieces together and made the queue longer still."""
    crowded: bool = False
    """More listeners hear audio the worker computed than it has lanes (``Planner.listeners``):
    however calm the queue is now, their next segments may all come due at once."""
    _dues: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _totals: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The queue's due times and running sums of its compute, once: every session shares
        # a reading, and asks it a segment's wait several times an event.
        object.__setattr__(self, "_dues", tuple(at for at, _ in self.queue))
        object.__setattr__(self, "_totals", tuple(accumulate(s for _, s in self.queue)))

    def waits(self, due: float) -> float:
        """``waits(queue, due)``, by bisection of the due times (the queue is due first first):
        a session asks it with the event loop's time, and a queue of hundreds took as long."""
        before = bisect_right(self._dues, due + _SLACK)
        return self._totals[before - 1] if before else 0.0


class Pacing:
    """``stall_guard_ms``: the margin; ``max_chars``: the segmenter's cap on a segment."""

    def __init__(self, stall_guard_ms: int, max_chars: int) -> None:
        self._margin = stall_guard_ms / 1000
        self._max_chars = max_chars
        self._cost = DEFAULT_PRIOR
        self._wait = 0.0
        self._idle = False
        self._backlog = 0.0
        self._load = Load(0.0, DEFAULT_PRIOR)
        self._crowded = False
        self._late = 0.0
        self._audio_per_char = 1 / _CHARS_PER_SECOND
        self._arrival = Arrival()

    def engine(self, load: Load) -> None:
        """The compute worker as ``load`` tells it: the engine's cost as it measures it, the
        seconds segments (every session's) waited for it lately, whether it is idle now (a
        segment asked for would start at once), the backlog a first segment asked for now
        would wait, and the queue a later segment waits in, as far as it is due before it."""
        self._cost, self._wait, self._idle = load.cost, load.wait, load.idle
        self._backlog, self._load, self._crowded = load.backlog, load, load.crowded

    def observe(self, seconds: float, chars: int, expected_wait: float = 0.0) -> None:
        """A segment of ``chars`` gave its first audio ``seconds`` after it was asked for, when
        the queue said it would wait ``expected_wait`` (``queue_wait``): what came on top of
        both (this session's own lateness: segments asked for after it and due before it,
        compute slower than its cost) rises at once with a later segment, and decays slowly
        after. The queue's wait counted here as well (a second time) made every session short
        of audio at once when it grew."""
        late = max(0.0, seconds - self._cost.latency(chars) - expected_wait)
        self._late = late if late > self._late else 0.9 * self._late + 0.1 * late

    def queue_wait(self, ahead: float | None) -> float:
        """Seconds a segment asked for now and due in ``ahead`` waits for the worker, as the
        queue says (None: a turn's first, as ``backlog`` says)."""
        return self._backlog if ahead is None else self._load.waits(ahead)

    def heard(self, chars: int, seconds: float) -> None:
        """A segment of ``chars`` gave ``seconds`` of audio (at the session's voice and
        speed)."""
        if chars > 0 and seconds > 0:
            self._audio_per_char = 0.8 * self._audio_per_char + 0.2 * seconds / chars

    def arrived(self, text: str, now: float, first: bool) -> None:
        """A delta came at ``now``; ``first``: its turn's first."""
        if first:
            self._arrival.turn_started()
        self._arrival.delta(text, now)

    def start_lead(self, rates: Rates | None = None) -> float:
        """Seconds of audio a turn's text in hand should hold before it starts speaking: what
        ``LEAD_CHARS`` take to arrive at the rate the text comes, less the speech that arrives
        while a first clause plays, and, where the text comes slower than it is spoken, what
        the listener would otherwise lose over ``HORIZON``. At 20 tokens a second none; at 5,
        about 2.5 s: a cut then finds four or five words waiting (cuts come when the listener
        has a guard's worth left, so a cut holds about the lead less the guard), and a price
        streamed a digit a token arrives whole before it is needed."""
        rates = rates or self._arrival.rates
        speech = rates.spoken * self._audio_per_char  # seconds of speech arriving a second
        deficit = HORIZON * max(0.0, 1.0 - speech)
        return max(0.0, LEAD_CHARS / max(rates.written, 1.0) - FIRST_AUDIO * speech) + deficit

    @property
    def rate_known(self) -> bool:
        """The conversation's text rate has been measured (``Arrival.measured``)."""
        return self._arrival.measured

    def holds_lead(self, pending_chars: int) -> bool:
        """``holds_start`` at the rate the deltas tell alone (the prior, weighed in, made two
        deltas at 5 tokens a second look twice as fast), as if the text came at ``SLOW``
        until then: whether a first segment asked for before the rate was known waits."""
        rates = self._arrival.seen or SLOW
        return pending_chars * self._audio_per_char < self.start_lead(rates)

    def holds_start(self, pending_chars: int) -> bool:
        """Whether a turn with ``pending_chars`` (spoken) in hand should wait for more text
        before its first segment: it would run dry before the next phrase could follow."""
        return pending_chars * self._audio_per_char < self.start_lead()

    @property
    def calm(self) -> bool:
        """Segments wait for the worker no more than ``CALM_WAIT`` lately, and first segments
        would not: compute spent on how a segment ends (``SynthesisOptions.then``) takes
        nothing from a listener about to run dry."""
        return not self._queued and self._late < CALM_WAIT

    @property
    def _queued(self) -> bool:
        """Segments (any session's) wait for the worker, lately or by the queue now."""
        return max(self._wait, self._backlog) >= CALM_WAIT

    @property
    def busy_cap(self) -> int | None:
        """While segments wait for the worker (not ``calm``), or more listeners share it than
        it has lanes (``Load.crowded``), the longest a later segment should be, spoken: what
        the engine computes within ``BUSY_JOB`` seconds. None when calm and not crowded, or
        where that is not a phrase (an engine whose every call costs more). Crowded counts
        while the queue is calm: a burst's conversations end their texts together, and a
        reply's last 130 characters, cut whole in a calm moment, came 254 ms late as the
        others' tails came due with it (``python -m bench continuity --burst 16``)."""
        if self.calm and not self._crowded:
            return None
        chars = self._cost.chars_within(BUSY_JOB)
        return chars if chars >= BUSY_LEAST else None

    @property
    def idle(self) -> bool:
        """The compute worker is idle: a segment asked for now starts at once."""
        return self._idle

    @property
    def slower_than_real_time(self) -> bool:
        """Each character costs more compute than the audio it gives."""
        return self._cost.per_char >= self._audio_per_char

    def latency(self, chars: int, ahead: float) -> float:
        """Seconds from asking for a segment of ``chars``, due in ``ahead``, to its first
        audio, expected: the engine's cost, its wait in the queue as far as the queue is due
        before it, and the session's own lateness lately (what neither showed)."""
        return self._cost.latency(chars) + self.queue_wait(ahead) + self._late

    def first_chars(self, speed: float) -> int:
        """The least text a turn's first segment should hold: as much as is heard while the
        next one waits for the worker, lately or by the queue as it is now (none when nothing
        waits). The queue's backlog counts only here, not in the guards: sessions starting
        together saw no wait lately, cut one or two words, and ran dry in their first turns
        (16 staggered conversations, three A/B runs: 1, 5 and 2 underruns against 6, 6 and 2,
        first audio p95 235-259 against 263-305 ms; bursts of 16: largest stall 127, 106 and
        114 against 143, 150 and 86 ms). A turn that waited for a lead (``start_lead``)
        speaks all of it in its first segment: the text it held, cut at two words, left a
        lone word for the next."""
        queued = round(max(self._wait, self._backlog) * _CHARS_PER_SECOND * speed)
        return max(queued, math.floor(self.start_lead() / self._audio_per_char))

    def guards(self, pending_chars: int, ahead: float) -> tuple[float, float]:
        """Audio left at which to cut at a clause, and at which to cut at any word, with
        ``pending_chars`` (spoken) for the next segment and ``ahead`` seconds left now.

        Both leave room for synthesizing all the pending text (up to a segment's cap) and for
        the worker's queue, as far as it is due before the segment.
        """
        latency = self.latency(pending_chars, ahead)
        return latency + self._margin, latency + self._margin / 3

    def cut_times(self, end: float | None, pending_chars: int, now: float) -> list[float]:
        """When the urgency rises, for a listener whose audio runs out at ``end``."""
        if end is None or self.slower_than_real_time:
            return []
        return [end - guard for guard in self.guards(pending_chars, end - now)]

    def urgency(self, ahead: float, pending_chars: int) -> Urgency:
        """With ``ahead`` seconds of audio left for the listener (sent or not)."""
        if self.slower_than_real_time:
            return Urgency.RELAXED
        clause_guard, word_guard = self.guards(pending_chars, ahead)
        if ahead <= word_guard + _SLACK:
            return Urgency.CRITICAL
        if ahead <= clause_guard + _SLACK:
            return Urgency.URGENT
        return Urgency.IDLE if self._idle else Urgency.RELAXED

    def fit(self, ahead: float, critical: bool = False, partial: int = 0) -> Fit:
        """How long the next cut may be with ``ahead`` seconds left, and how short;
        ``partial``: characters of the next word in hand, still growing.

        The most: synthesized within the audio left, less the margin; once ``critical``, less
        two thirds of it. With the whole margin nothing fits at the critical time (it leaves
        the pending text's latency and a third of the margin), and the shortest piece went
        out: one word at a time, 18 of 50 later segments of a lone conversation, against 8 of
        44 with two thirds (``python -m bench capacity``, one A/B run; 16 staggered
        conversations: 57 of 251 against 37 of 231). With a third, 2 of 40, but a lone
        conversation heard gaps of 20-38 ms (two runs), and ``python -m bench slow_engine``
        stalled more (1x, N = 4: 8 stalls against 2); two thirds stalled no more than the whole
        margin in either.
        The least: a piece of ``c`` characters gives ``r * c`` seconds of audio for
        ``a + b * c`` of latency (the queue wait counted with ``a``), so it gains ground on
        the listener only past ``a / (r - b)`` characters.
        """
        wait = self.queue_wait(ahead) + self._late
        margin = self._margin * 2 / 3 if critical else self._margin
        most = self._cost.chars_within(ahead + _SLACK - margin - wait)
        gain = self._audio_per_char - self._cost.per_char
        least = math.ceil((self._cost.fixed + wait) / gain) if gain > 0 else self._max_chars
        # The next word is due in about a word's time, less what of it is in hand while calm
        # (``partial`` characters; in a burst, waiting on it stalled more); with it the cut is a
        # phrase.
        coming = WORD_CHARS - (partial if self.calm else 0)
        word = max(1, coming) / max(self._arrival.rates.written, 1.0)
        lone = word + self.latency(self._max_chars // 10, ahead) - ahead > LONE_WAIT
        # Segments waiting for the worker, not this session's own lateness (alone at 5 tokens
        # a second that let cuts end on "a").
        slack = self._cost.chars_within(self._cost.fixed + WORD_SLACK)
        return Fit(most=max(most, 0), least=least, lone=lone, split=self._queued, slack=slack)
