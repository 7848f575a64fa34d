"""A token as the normalizer reads it: a whitespace-separated word split into its opening
punctuation, its core and its closing punctuation, with the tokens around it."""

from __future__ import annotations

from dataclasses import dataclass

from .numbers import Locale

OPENERS = "\"'([{\u00ab\u201c\u2018\u00bf\u00a1"
CLOSERS = ".,;:!?\u2026\"')]}\u00bb\u201d\u2019"
SENTENCE_END = ".!?\u2026"


@dataclass(frozen=True, slots=True)
class Token:
    space: str
    """The whitespace before it (each piece owns the whitespace that precedes it)."""
    lead: str
    core: str
    trail: str
    verbatim: bool = False
    """Cut at the hold limit: read as it stands."""

    @property
    def text(self) -> str:
        return self.space + self.lead + self.core + self.trail

    @property
    def ends_sentence(self) -> bool:
        return any(c in SENTENCE_END for c in self.trail)

    @property
    def capitalized(self) -> bool:
        return self.core[:1].isupper() and self.core.replace("'", "").isalpha()


def split(space: str, word: str) -> Token:
    """``"(Dr."`` -> lead ``"("``, core ``"Dr"``, trail ``"."``: sentence punctuation stays
    outside what is read (an abbreviation takes its own dot back: see ``abbreviation_trail``)."""
    start = 0
    while start < len(word) and word[start] in OPENERS:
        start += 1
    end = len(word)
    while end > start and word[end - 1] in CLOSERS:
        end -= 1
    return Token(space, word[:start], word[start:end], word[end:])


@dataclass(frozen=True, slots=True)
class Around:
    """What a reading may look at besides the token itself."""

    locale: Locale
    prev: Token | None
    """The token before, as written (None: the first)."""
    starts_sentence: bool
    prev_starts_sentence: bool
    next: Token | None
    """The token after (None: the text ends). Only tokens that wait for it
    (``waits_for_next``) may look at it: the others are read before it arrives."""

    @property
    def sentence_ends(self) -> bool:
        """The token is last in its sentence: the text ends, or the next word starts one."""
        return self.next is None or self.next.lead[:1] in ('"', "\u201c") or self.next.capitalized


def abbreviation_trail(token: Token, around: Around, can_end: bool = True) -> str:
    """The closing punctuation of an expanded abbreviation: its own dot goes ("Dr. Patel" ->
    "Doctor Patel"), unless it also ends the sentence ("at 3 p.m." keeps one for the
    segmenter); one that never ends a sentence (a title, "e.g.") always loses it, as does one
    a clause mark follows ("221 Baker St., on" cut after the comma ended a sentence there)."""
    clause = token.trail[1:2] in (",", ";", ":")
    if token.trail.startswith(".") and not (can_end and around.sentence_ends and not clause):
        return token.trail[1:]
    return token.trail
