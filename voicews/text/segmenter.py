"""Text deltas in, speakable segments out: eager for the first audio, natural after it.

Pure and clock-free: the session decides how urgent the next cut is (it knows how much audio
the listener has left) and asks for a segment with that :class:`Urgency`. A cut is only ever
made where the text has confirmed it: a word ends when whitespace follows it, so ``3.`` waiting
for ``14`` or ``Dr.`` waiting for `` Smith`` is never split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum, IntEnum

_CLOSERS = "\"')]}\u00bb\u201d\u2019"  # and the closing guillemet and curly quotes
_OPENERS = "\"'([{\u00ab\u201c\u2018"
_SENTENCE_END = ".!?\u2026"  # with the ellipsis character
_CLAUSE_END = ",;:"
TRAILING_MARKS = _CLOSERS + _SENTENCE_END + _CLAUSE_END
"""What may follow a word's own characters: closers and sentence and clause ends."""
_EN_DASH, _EM_DASH = "\u2013", "\u2014"
_DASHES = ("-", _EN_DASH, _EM_DASH)
# Early confirmation: a comma right after a letter is a clause end even before the next
# token arrives (a comma inside a number or URL has no letter before it, or is URL-like).
_EARLY_CLAUSE_END = ",;"
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st vs etc no nos approx inc ltd co corp mt ft fig vol dept est
    gen gov sen rep capt lt col sgt jan feb mar apr jun jul aug sep sept oct nov dec cf al
    mon tue tues wed thu thur thurs fri sat sun ph.d""".split()
)
_DOTTED = re.compile(r"(?:[a-z]\.)+[a-z]")  # e.g, i.e, u.s.a, a.m
_URL_START = re.compile(r"(?i)[^\w\s]*(?:[a-z][a-z0-9+.-]*://|www\.)")  # a token that is one
_URL_LIKE = re.compile(r"://|@|/|www\.|\w\.\w")
_TOKEN = re.compile(r"\S+")
_JOINERS = frozenset(
    """to in on at for with from by into onto upon about under over between through during
    without within near past until till across behind beside besides around toward towards
    against among along like per via beyond below above beneath inside outside throughout except
    despite unlike than and or but nor if so because although though unless whether while
    whose""".split()
)
"""Prepositions and conjunctions: a phrase starts with one, and leads on from it."""
_LEADS_PHRASE = _JOINERS | frozenset(
    """a an the this these those my your his her its our their some any every each no another both
    either neither such what of versus""".split()
)
"""Determiners, prepositions and conjunctions: a segment ending on one cuts a phrase from its
noun ("hotels near | the beach"). Only where no other word end is in hand and the listener is
about to run dry, or others' segments wait for the worker (a break is heard as less than the
silence)."""
_LEADS_ON = frozenset(
    """that is are was were am be been being will would can could should shall must may might do
    does did has have had cannot won't can't don't doesn't didn't isn't aren't wasn't weren't
    haven't hasn't hadn't wouldn't couldn't shouldn't not very there here i we they he she it
    i'm i'll i've i'd you're you'll you've you'd we're we'll we've we'd they're they'll they've
    they'd he's she's it's that's there's here's what's let's two three four five six seven
    eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen
    nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million
    billion""".split()
)
"""Auxiliaries, subject pronouns, "that", "there", number words: heard as leading on ("The
driver should | bring it", "Tickets are twelve | dollars"), but a lighter break than a split
noun phrase: a segment ends on one only once the listener is about to run dry."""
_MODIFIERS = frozenset(
    """new next last first other same own only whole entire main current previous usual total
    full final various additional extra particular specific exact latest nearest closest""".split()
)
"""Adjectives that come before their noun almost always: leading on as :data:`_LEADS_ON`
does ("The next | train"), except that a turn's first segment may end on one ("Your new"),
as it may on any word: waiting for the noun cost that reply 150 ms of first audio at 20
tokens a second, and the median of eight replies 50 ms (``python -m bench continuity``)."""


class _Leaning(IntEnum):
    """Which word ends :meth:`Segmenter._cuts` offers besides those a phrase may end on."""

    NONE = 0
    ON = 1
    """After a word of :data:`_LEADS_ON` or :data:`_MODIFIERS` too: a critical cut."""
    PHRASE = 2
    """After any word: a critical cut with no other word end in hand."""


def binds_forward(word: str) -> bool:
    """Whether a segment ending on ``word`` (no mark after it) cuts it from what it leads into
    (:data:`_LEADS_PHRASE`, :data:`_LEADS_ON` or :data:`_MODIFIERS`; any case, curly
    apostrophes too)."""
    return _leaning(word) is not _Leaning.NONE


def _leaning(word: str, first: bool = False) -> _Leaning:
    """The least :class:`_Leaning` under which a cut may follow ``word``; ``first``: a turn's
    first segment's cut."""
    core = word.lstrip(_OPENERS).lower().replace("\u2019", "'")
    if core in _LEADS_PHRASE:
        return _Leaning.PHRASE
    if core in _LEADS_ON or (core in _MODIFIERS and not first):
        return _Leaning.ON
    return _Leaning.NONE


_PHRASE_STARTS = _JOINERS | frozenset("which who where when since that after before".split())
"""Words a phrase starts with: at a word cut, the place before one is the better one."""
_NUMBER = re.compile(r"[$\u20ac\u00a3#]?\d[\d,.:]*%?")  # 3, $1,249.99, 10:30, 60%
_READ_AS_WORD = re.compile("[0-9$\u20ac\u00a3%#]")
SPOKEN_EXTRA = 6
"""Characters a digit, or a sign read as a word (``$ \u20ac \u00a3 % #``), adds to a text's spoken
length: "48213" is read "forty-eight thousand two hundred thirteen"."""


class Boundary(IntEnum):
    """How strongly a segment's end separates it from the next: sets the pause after it."""

    WORD = 1
    CLAUSE = 2
    SENTENCE = 3


class Urgency(Enum):
    """How hard the session needs the next segment."""

    FIRST = "first"
    """Turn start: the first clause, or the first few words, whichever comes first."""
    RELAXED = "relaxed"
    """Audio in hand: wait for a sentence end (or a clause once the text grows long)."""
    IDLE = "idle"
    """Audio in hand and the compute idle: a sentence end, or a clause end of at least
    ``idle_clause_words`` with a word after it in hand (said with it, the clause ends as its
    sentence goes on): computed now it costs no one anything, and the turn's last audio comes
    sooner after its text ends (the sentence still arriving is then one clause)."""
    URGENT = "urgent"
    """The listener is running low: a sentence or clause end, the longest piece there is."""
    CRITICAL = "critical"
    """The listener is about to run dry: the best boundary there is, a word end at worst."""
    FLUSH = "flush"
    """Text paused (idle) or ended: everything pending, up to the length cap."""


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    boundary: Boundary


@dataclass(frozen=True, slots=True)
class Fit:
    """What the engine's cost allows an urgent cut: a piece of ``most`` characters (spoken,
    :func:`spoken_length`) is synthesized before the listener runs dry; one under ``least``
    costs more time than the audio it gives. ``lone``: whether a critical cut may be a lone
    word; where the next word is due soon enough, waiting for it is heard as less of a break
    than a word said on its own."""

    most: int
    least: int
    lone: bool = True
    split: bool = False
    """Whether a critical cut may end on any word from the start (other sessions' segments
    wait for the worker, and a late one is a stall)."""
    slack: int = 12
    """Spoken characters past the fit (or past a lone word that overruns it) a second word may
    take rather than leave the first alone: what the engine computes in ``Pacing``'s
    ``WORD_SLACK`` (Piper's 12 characters, Kokoro's 2-5), against a word heard on its own."""

    def holds(self, cut: _Cut | None) -> bool:
        """Whether ``cut`` is synthesized in time (``most``) and gains ground (``least``)."""
        return cut is not None and self.least <= cut.spoken <= self.most

    def pair_most(self, single: int) -> int:
        """The most a pair may hold rather than leave a word of ``single`` characters alone:
        the fit, or the lone word where it overruns the fit, and the slack."""
        return max(self.most, single) + self.slack


def spoken_length(text: str) -> int:
    """About how long ``text`` is as read aloud, in characters: what its synthesis costs and
    the audio it gives go by this, not by its written length ("$312.50," is 8 characters
    and 49 of Piper's phonemes). Over the bench replies and ten sentences heavy with numbers,
    Piper's phonemes per spoken character: median 0.98 times those per written character of
    plain text, spread 0.19 (written length: 1.17, spread 0.97)."""
    return len(text) + SPOKEN_EXTRA * len(_READ_AS_WORD.findall(text))


@dataclass(frozen=True, slots=True)
class SegmenterConfig:
    first_words: int | None = None
    """Words in the first segment when no clause boundary comes sooner; None: the engine's
    (``voicews.core.cost.FIRST_WORDS``), two where it names none."""

    @property
    def words_first(self) -> int:
        """:attr:`first_words`, or two."""
        return 2 if self.first_words is None else self.first_words

    idle_clause_words: int = 4
    """Least words in a clause cut while the compute is idle (:attr:`Urgency.IDLE`): "Sure,"
    alone is not worth an inference of its own."""
    max_chars: int = 250
    """Longest segment, so one job never holds the compute worker for long: a longer token
    (a 4,000-character word, base64) is cut into pieces of this size. A URL is the one token
    kept whole, however long: it is read shortened (:func:`voicews.text.urls.speakable`)."""


_BUSY_PHRASE_WORDS = 3
"""Least words a phrase cut for the busy cap holds: shorter, it is heard as a break."""


@dataclass(frozen=True, slots=True)
class _Cut:
    end: int  # index in the buffer just after the token
    boundary: Boundary
    words: int  # tokens before the cut
    chars: int  # length of the stripped segment text
    spoken: int  # its spoken_length
    before_phrase: bool = False  # the next word starts a phrase ("and", "because", "with")


class Segmenter:
    """Accumulates one turn's text and hands out segments on request."""

    def __init__(self, config: SegmenterConfig | None = None) -> None:
        self.config = config or SegmenterConfig()
        self._buf = ""
        self._closed = False

    def feed(self, text: str) -> None:
        if self._closed:
            raise RuntimeError("feed() after close()")
        self._buf += text

    def close(self) -> None:
        """No more text: the end of the buffer becomes a sentence boundary."""
        self._closed = True

    @property
    def pending_chars(self) -> int:
        return len(self._buf)

    @property
    def next_spoken(self) -> int:
        """Spoken length of the pending text, up to a segment's cap: the most the next
        segment can cost."""
        return spoken_length(self._buf.lstrip()[: self.config.max_chars])

    @property
    def partial_chars(self) -> int:
        """Characters of the word still growing at the end of the text (none once whitespace
        follows it, or the text is closed): how much of the next word is in hand."""
        if self._closed or not self._buf or self._buf[-1].isspace():
            return 0
        return len(self._buf.split()[-1])

    @property
    def next_word(self) -> str:
        """The word the pending text starts with, if it is one of letters (a look-ahead for a
        segment cut before it: ``SynthesisOptions.then``); "" where it is not, or none has
        come. It may still grow: it is heard only as where the sentence goes."""
        match = _TOKEN.search(self._buf)
        marks = _OPENERS + _CLOSERS + _SENTENCE_END + _CLAUSE_END
        word = match.group().strip(marks) if match else ""
        return word if word.replace("'", "").replace("\u2019", "").isalpha() else ""

    @property
    def sentence_in_hand(self) -> bool:
        """The pending text reaches a sentence end: the next cut can be a whole sentence."""
        return any(cut.boundary is Boundary.SENTENCE for cut in self._cuts())

    @property
    def has_text(self) -> bool:
        return bool(self._buf.strip())

    def next_segment(
        self,
        urgency: Urgency,
        first_chars: int = 0,
        fit: Fit | None = None,
        busy_cap: int | None = None,
    ) -> Segment | None:
        """``first_chars``: the least a first segment holds, spoken (more when the compute
        worker is loaded, so the listener has enough in hand while the next one waits).
        ``fit``: how long an urgent or critical cut may be (None: as long as there is).
        ``busy_cap``: with the worker busy, the longest a later segment should be, spoken
        (:meth:`_within_busy_cap`)."""
        if not self.has_text:
            self._buf = ""
            return None
        cuts = self._cuts(first=urgency is Urgency.FIRST)
        cap = self.config.max_chars
        if urgency is Urgency.FIRST:
            least = 0 if self._closed else min(first_chars, cap)  # closed: all there will be
            for index, cut in enumerate(cuts):
                first = cut.boundary >= Boundary.CLAUSE or cut.words >= self.config.words_first
                # Never past a sentence end: the engine stops there anyway, and a word cut
                # beyond it ("fit. The") is heard.
                if first and (cut.spoken >= least or cut.boundary is Boundary.SENTENCE):
                    ends = cuts[index + 1] if index + 1 < len(cuts) else None
                    if least and ends is not None and _one_word_short(cut, ends, cap):
                        cut = ends  # "... the depot right now.", not "now." alone after it
                    return self._take(cut) if cut.chars <= cap else self._oversize(cuts)
            if len(self._buf.strip()) <= cap:
                return None
        fitting = self._fitting(cuts, busy_cap)
        over_cap = len(self._buf.strip()) > cap
        if fit is not None and urgency is Urgency.URGENT and not over_cap:
            return self._take_or_none(self._fitted(urgency, fitting, fit))
        if fit is not None and urgency is Urgency.CRITICAL and not over_cap:
            return self._take_or_none(self._critical(fitting, fit, busy_cap))
        sentence = next((c for c in fitting if c.boundary is Boundary.SENTENCE), None)
        if sentence is not None:
            return self._take(sentence)
        if urgency is Urgency.FLUSH:
            if not over_cap:
                return self._take_all()
            return self._oversize(cuts, flush=True)
        if urgency in (Urgency.URGENT, Urgency.IDLE):
            least = self.config.idle_clause_words if urgency is Urgency.IDLE else 0
            clauses = [c for c in fitting if c.boundary >= Boundary.CLAUSE and c.words >= least]
            if urgency is Urgency.IDLE and not self._closed:
                clauses = [c for c in clauses if self._buf[c.end :].strip()]
            if clauses:
                return self._take(clauses[-1])
        if urgency is Urgency.CRITICAL or over_cap:
            best = self._best(fitting)
            if best is not None:
                return self._take(best)
            if over_cap:
                return self._oversize(cuts)
        return None

    def trial_first(self, first_chars: int = 0) -> Segment | None:
        """The first segment there would be if the last token, still growing, were a whole
        word (``have`` may yet become ``haven't``): for a trial, whose audio is held until the
        next token says (:meth:`judge_trial`). None where the words are too few or too short
        (``first_chars``), or the token is not all letters and apostrophes (a number belongs
        with what follows; punctuation may still grow)."""
        text = self._buf.strip()
        words = text.split()
        if self._closed or not words or self._buf[-1].isspace():
            return None
        if not words[-1].replace("'", "").replace("\u2019", "").isalpha():
            return None
        if _leaning(words[-1], first=True) is not _Leaning.NONE:
            return None  # "In the" is no phrase: wait for its noun
        if len(words) < self.config.words_first or len(text) > self.config.max_chars:
            return None
        return Segment(text, Boundary.WORD) if spoken_length(text) >= first_chars else None

    def judge_trial(self, trial: Segment) -> bool | None:
        """Whether the text since confirms a trial's segment (:meth:`trial_first`): True, and
        it is taken, once whitespace follows it; False once the token grew past it; None while
        nothing has come."""
        text = self._buf.lstrip()
        if text == trial.text and not self._closed:
            return None
        if not text.startswith(trial.text) or not text[len(trial.text) :][:1].isspace():
            return False
        self._buf = text[len(trial.text) :].lstrip()
        return True

    def _fitting(self, cuts: list[_Cut], busy_cap: int | None) -> list[_Cut]:
        fitting = [c for c in cuts if c.chars <= self.config.max_chars]
        return fitting if busy_cap is None else self._within_busy_cap(fitting, busy_cap)

    def _critical(self, cuts: list[_Cut], fit: Fit, busy_cap: int | None) -> _Cut | None:
        """:meth:`_fitted` for a critical cut, ending where a phrase may; where that leaves
        nothing that both fits and gains ground, or only a lone word, after a word of
        :data:`_LEADS_ON` too ("Here are | your options:" rather than the whole clause late,
        "check that | for you" rather than "check" alone); where there is no word end
        at all, after any word: a break is heard as less than the silence. With the worker
        busy (``fit.split``), after a word of :data:`_LEADS_ON` from the start, and after any
        word where nothing else fits: the longer pieces the others leave took lanes from the
        other listeners (a burst of 16, simulated: 9 of 16 stalled against 2), but a
        determiner or preposition cut from its noun ("like the | 2:45 flight") is the
        break heard most (16 at once, simulated over 8 rotations of the replies: such cuts
        32 and 60 of 471 and 852 against 14 and 23, the stalls no more). So such a cut is
        not taken while a piece ending otherwise is in hand: where nothing fits, the listener
        stalls however the text is cut, and a split is a second break for nothing ("Okay.
        Preheat the | oven"); where only the split fits, the phrase goes whole, a little
        later ("like the 2:45 flight", not "like the | 2:45 flight"). Bursts of 16 through
        the server, three runs of 4, 6 and 6 bursts: such ends 0 of 1,594 cuts against 15 of
        1,621 where they were taken when they fit; conversations stalled over 100 ms 4
        against 2 of 256, first audio p95 442-497 against 467-486 ms."""
        if fit.split:
            on = self._fitted(Urgency.CRITICAL, self._fitting_at(_Leaning.ON, busy_cap), fit)
            if on is not None:
                return on
            return self._fitted(Urgency.CRITICAL, self._fitting_at(_Leaning.PHRASE, busy_cap), fit)
        cut = self._fitted(Urgency.CRITICAL, cuts, fit)
        fits = fit.holds(cut)
        if cut is None or not fits or cut.words == 1:  # "check | that for you": a lone word
            lenient = self._fitted(Urgency.CRITICAL, self._fitting_at(_Leaning.ON, busy_cap), fit)
            most = fit.most
            if cut is not None and cut.words == 1:  # a second word, as _fitted allows one
                most = fit.pair_most(cut.spoken)
            if (
                lenient is not None
                and (lenient.words > 1 or not fits)
                and fit.least <= lenient.spoken <= most
            ):
                return lenient
        if cut is not None or cuts:
            return cut
        return self._fitted(Urgency.CRITICAL, self._fitting_at(_Leaning.PHRASE, busy_cap), fit)

    def _fitting_at(self, leaning: _Leaning, busy_cap: int | None) -> list[_Cut]:
        return self._fitting(self._cuts(leaning=leaning), busy_cap)

    def _take_or_none(self, cut: _Cut | None) -> Segment | None:
        return None if cut is None else self._take(cut)

    def _fitted(self, urgency: Urgency, cuts: list[_Cut], fit: Fit) -> _Cut | None:
        """Where to cut: the first sentence if its synthesis fits (a sentence costs what it
        costs), else the longest piece of it that fits, ending at a clause (at any word once
        critical) and long enough to gain ground. Critical with no such piece, the listener
        stalls however the text is cut: the shortest piece that gains ground, else the best
        there is; but no lone word where the next is in hand (within ``fit.slack`` of the
        fit), nor unless ``fit.lone`` (None: wait for the next word)."""
        if urgency is Urgency.CRITICAL:
            pairs = [c for c in cuts if c.words > 1]
            # The next word in hand costs a few characters' compute: say it with this one.
            # Once the text is closed no next word comes: a lone last word is said, not kept.
            # Nor where a word after it is in hand and makes no pair (it leads on): the next
            # alone would not either.
            whole = len(self._buf.split()) - (0 if self._buf[-1:].isspace() else 1)
            wait = not fit.lone and not self._closed and (bool(pairs) or whole < 2)
            single = cuts[0].spoken if cuts else 0  # the lone word a pair would replace
            if wait or (pairs and pairs[0].spoken <= fit.pair_most(single)):
                cuts = pairs
        sentence = next((c for c in cuts if c.boundary is Boundary.SENTENCE), None)
        if sentence is not None:
            if sentence.spoken <= fit.most:
                return sentence
            cuts = [c for c in cuts if c.end <= sentence.end]
        good = [c for c in cuts if fit.holds(c)]
        clauses = [c for c in good if c.boundary >= Boundary.CLAUSE]
        if clauses:
            return clauses[-1]
        if urgency is Urgency.URGENT:
            return None
        phrases = [c for c in good if c.before_phrase]
        if phrases or good:
            return (phrases or good)[-1]
        gaining = [c for c in cuts if c.spoken >= fit.least]
        return gaining[0] if gaining else self._best(cuts)

    @staticmethod
    def _within_busy_cap(cuts: list[_Cut], busy_cap: int) -> list[_Cut]:
        """The cuts of ``busy_cap`` spoken characters or fewer, where a phrase of
        ``_BUSY_PHRASE_WORDS`` or more ends among them (at a clause, or before a conjunction
        or preposition); else all of them. A segment is synthesized whole before its first
        audio, so a long one holds a lane while other listeners' segments wait behind it, and
        its own first audio comes late (a burst of 16: sentence rests of 100-125 characters
        started 180-400 ms before they were due and took 430-520 ms)."""
        within = [c for c in cuts if c.spoken <= busy_cap]
        phrase = any(
            (c.boundary >= Boundary.CLAUSE or c.before_phrase) and c.words >= _BUSY_PHRASE_WORDS
            for c in within
        )
        return within if phrase and len(within) < len(cuts) else cuts

    @staticmethod
    def _best(cuts: list[_Cut]) -> _Cut | None:
        """The longest piece ending at a clause, else before a phrase, else at a word."""
        clauses = [c for c in cuts if c.boundary >= Boundary.CLAUSE]
        phrases = [c for c in cuts if c.before_phrase]
        best = clauses or phrases or cuts
        return best[-1] if best else None

    def _oversize(self, cuts: list[_Cut], flush: bool = False) -> Segment | None:
        """Over the cap with no cut inside it: a URL through its end (None while it grows,
        unless flushing), any other token cut at the cap."""
        best = self._best([c for c in cuts if c.chars <= self.config.max_chars])
        if best is not None:
            return self._take(best)
        if _URL_START.match(self._buf.lstrip()):
            if cuts:
                return self._take(cuts[0])
            return self._take_all() if flush else None
        text = self._buf.lstrip()
        cut = self._hard_cut(text)
        self._buf = text[cut:]
        return Segment(text[:cut], Boundary.WORD)

    def _hard_cut(self, text: str) -> int:
        """Where to cut a token longer than the cap: after the last punctuation mark in the
        cap's second half, else at the cap."""
        cap = self.config.max_chars
        marks = [text.rfind(mark, cap // 2, cap) for mark in "-/_.,;:"]
        return max(marks) + 1 if max(marks) > 0 else cap

    def _take(self, cut: _Cut) -> Segment:
        text = self._buf[: cut.end].strip()
        self._buf = self._buf[cut.end :].lstrip()
        return Segment(text, cut.boundary)

    def _take_all(self) -> Segment:
        text = self._buf.strip()
        self._buf = ""
        boundary = _classify(text.split()[-1]) or Boundary.WORD
        return Segment(text, boundary)

    def _cuts(self, first: bool = False, leaning: _Leaning = _Leaning.NONE) -> list[_Cut]:
        """Every confirmed place the buffer may be cut, in order; for a turn's ``first``
        segment, a sentence end still growing counts too (:func:`_early_boundary`);
        ``leaning``: after words that lead into the next too, as far as it says."""
        buf = self._buf
        lead = len(buf) - len(buf.lstrip())
        cuts: list[_Cut] = []
        marks = [mark.start() for mark in _READ_AS_WORD.finditer(buf)]  # see spoken_length
        read = 0  # the marks before the token's end
        said = False  # a letter or digit so far: no piece of punctuation alone (an ellipsis' rest)
        tokens = list(_TOKEN.finditer(buf))
        for words, match in enumerate(tokens, start=1):
            token, end = match.group(), match.end()
            while read < len(marks) and marks[read] < end:
                read += 1
            said = said or any(char.isalnum() for char in token)
            boundary: Boundary | None
            final = self._closed and not buf[end:].strip()
            if final:
                boundary = Boundary.SENTENCE
            elif end < len(buf):
                boundary = _classify(token, leaning, first)
                if boundary is not None and "\n" in buf[end : end + 2]:
                    boundary = Boundary.SENTENCE
            else:
                boundary = _early_boundary(token, first)
            if boundary is not None and (said or final):
                spoken = end - lead + SPOKEN_EXTRA * read
                after = tokens[words].group() if words < len(tokens) else ""
                then = after.lstrip(_OPENERS).lower()
                # After a word that leads on, its determiner is where the phrase starts:
                # "It looks like | the 2:45 flight", not "like the | 2:45 flight".
                phrase = then in _PHRASE_STARTS or (
                    then in _LEADS_PHRASE and _leaning(token) is not _Leaning.NONE
                )
                cuts.append(_Cut(end, boundary, words, end - lead, spoken, phrase))
        return cuts


def _one_word_short(cut: _Cut, then: _Cut, cap: int) -> bool:
    """Whether ``cut``, at a word, is one word short of a clause or sentence end in hand."""
    return (
        cut.boundary is Boundary.WORD
        and then.boundary >= Boundary.CLAUSE
        and then.words == cut.words + 1
        and then.chars <= cap
    )


def _classify(
    token: str, leaning: _Leaning = _Leaning.NONE, first: bool = False
) -> Boundary | None:
    """The boundary after a complete token, or None where no cut may be made (``leaning``:
    after which words that lead into the next one may; ``first``: a turn's first segment)."""
    core = token.rstrip(_CLOSERS)
    if not core:
        return Boundary.WORD
    last = core[-1]
    if last in _SENTENCE_END:
        if last == "." and not core.endswith("..") and _is_abbreviation(core):
            return None
        return Boundary.SENTENCE
    if last in _CLAUSE_END or core in _DASHES or last in (_EN_DASH, _EM_DASH):
        return Boundary.CLAUSE
    if _NUMBER.fullmatch(core):
        return None  # a number belongs with what follows: "3 p.m.", "18 degrees"
    if _leaning(core, first) > leaning:
        return None  # "the", "of", "should": the start of what follows
    return Boundary.WORD


def _early_boundary(token: str, first: bool = False) -> Boundary | None:
    """A clause end the last, still growing token already confirms (``there,``); for a turn's
    ``first`` segment, a sentence end too (``course.``, ``see?``), a token sooner, where the
    word before it is all letters and no abbreviation. Only there: the next token could still
    turn it into an ellipsis or an interrobang, heard as a sentence end all the same, which is
    worth the first audio coming one token sooner, not a later segment's."""
    if len(token) < 2 or not token[-2].isalpha() or _URL_LIKE.search(token):
        return None
    if token[-1] in _EARLY_CLAUSE_END:
        return Boundary.CLAUSE
    if not first or token[-1] not in ".!?" or not token[:-1].lstrip(_OPENERS).isalpha():
        return None
    return None if token[-1] == "." and _is_abbreviation(token) else Boundary.SENTENCE


def _is_abbreviation(core: str) -> bool:
    word = core[:-1].lstrip(_OPENERS).lower()
    if len(word) == 1:
        return word.isalpha()  # an initial: "J. Smith"
    return word in _ABBREVIATIONS or bool(_DOTTED.fullmatch(word))
