"""Agent text as a person would say it ("$1,234.56" -> "one thousand two hundred thirty-four
dollars and fifty-six cents"), streamed: deltas in, whole tokens out, each with what to say.

Sans-I/O. A piece is one token and the whitespace before it (whitespace after the last token
is a piece of its own, given by ``flush``); its ``original`` is the input exactly, so word
marks and heard text map back to what the client sent. A token is committed only once it
cannot grow (whitespace follows, or the text ends), and one read by what follows it ("Dr.",
"Dec", a number before a month or a unit) also waits for the next token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import numeric, words
from .numbers import Locale
from .tokens import Around, Token, abbreviation_trail, split

MAX_HOLD_CHARS = 80
"""A URL or email of up to this many characters is read whole; a longer run of non-space
characters is cut here and read as it stands (a base64 blob is not worth holding back)."""

_NON_SPACE = re.compile(r"\S")
_SPACE = re.compile(r"\s")
_TIME_DOT = re.compile(r"(?i).*\d[ap]\.m")


@dataclass(frozen=True, slots=True)
class Piece:
    original: str
    """The characters of the input exactly as received: all pieces' joined is the input."""
    spoken: str
    """What to say for them (== original where nothing changed)."""


@dataclass(frozen=True, slots=True)
class NormalizeOptions:
    locale: Locale = "en-US"
    lexicon: Mapping[str, str] = field(default_factory=dict)
    """word -> spoken form, matched whole-word and case-insensitively (brand and people's
    names); it wins over every rule."""
    max_hold_chars: int = MAX_HOLD_CHARS


class StreamNormalizer:
    """Per turn: deltas in, final pieces out; never commits a token that may still grow."""

    def __init__(self, options: NormalizeOptions | None = None) -> None:
        self._options = options or NormalizeOptions()
        self._lexicon = {k.lower(): v for k, v in self._options.lexicon.items()}
        self._buf = ""
        self._start = 0  # where the uncommitted text starts in _buf
        self._spaces = 0  # whitespace known to follow _start (not scanned again)
        self._held: Token | None = None
        self._prev: Token | None = None
        self._prev_starts_sentence = True
        self._cut = False  # the last token was cut at the hold limit: its rest is verbatim too

    def push(self, delta: str) -> list[Piece]:
        self._buf += delta
        pieces: list[Piece] = []
        while (token := self._complete_token()) is not None:
            pieces += self._accept(token)
        self._buf, self._start = self._buf[self._start :], 0
        return pieces

    def flush(self) -> list[Piece]:
        """End of text: everything held, read as the end of the text. Text pushed after is
        read as a new text that follows this one."""
        pieces: list[Piece] = []
        while (token := self._complete_token(final=True)) is not None:
            pieces += self._accept(token)
        if self._held is not None:
            pieces.append(self._read(self._held, None))
            self._held = None
        rest = self._buf[self._start :]
        if rest:
            pieces.append(Piece(rest, rest))
        self._buf, self._start, self._spaces, self._cut = "", 0, 0, False
        return pieces

    def _complete_token(self, final: bool = False) -> Token | None:
        """The next token that can no longer grow: whitespace follows it, or the text ends
        (``final``), or it reached the hold limit: then its first ``max_hold_chars``
        characters, read as written, and so is the rest of it. Each character is scanned a
        bounded number of times, however the text is split."""
        first = _NON_SPACE.search(self._buf, self._start + self._spaces)
        if first is None:
            self._spaces = len(self._buf) - self._start
            return None
        start, limit = first.start(), self._options.max_hold_chars
        after = _SPACE.search(self._buf, start, start + limit)
        end = after.start() if after is not None else min(len(self._buf), start + limit)
        if end - start < limit and after is None and not final:
            self._spaces = start - self._start
            return None
        space, word = self._buf[self._start : start], self._buf[start:end]
        rest_of_cut = self._cut and not space
        self._cut = end - start == limit and after is None
        self._start, self._spaces = end, 0
        if self._cut or rest_of_cut:
            return Token(space, "", word, "", verbatim=True)
        return split(space, word)

    def _accept(self, token: Token) -> list[Piece]:
        pieces = []
        if self._held is not None:
            pieces.append(self._read(self._held, token))
            self._held = None
        if words.waits_for_next(token):
            self._held = token
        else:
            pieces.append(self._read(token, None))
        return pieces

    def _read(self, token: Token, nxt: Token | None) -> Piece:
        starts_sentence = self._prev is None or self._prev.ends_sentence
        around = Around(
            self._options.locale, self._prev, starts_sentence, self._prev_starts_sentence, nxt
        )
        self._prev, self._prev_starts_sentence = token, starts_sentence
        spoken = None if token.verbatim else self._spoken(token, around)
        original = token.text
        return Piece(original, original if spoken is None else token.space + spoken)

    def _spoken(self, token: Token, around: Around) -> str | None:
        core = token.core
        if self._lexicon:
            stem, s = (core[:-2], core[-2:]) if core[-2:] in ("'s", "\u2019s") else (core, "")
            if (said := self._lexicon.get(stem.lower())) is not None:
                return token.lead + said + s + token.trail
        if any(c in "@./" for c in core) and (spoken := words.link(core)) is not None:
            return token.lead + spoken + token.trail
        if any(c.isdecimal() for c in core):
            if (spoken := numeric.read(token, around)) is None:
                return None
            dotted = _TIME_DOT.fullmatch(core) is not None
            trail = abbreviation_trail(token, around) if dotted else token.trail
            return token.lead + spoken + trail
        return words.read(token, around)


def normalize(text: str, options: NormalizeOptions | None = None) -> str:
    """One shot: the spoken form of a whole text (the same as streaming it in any deltas)."""
    stream = StreamNormalizer(options)
    return "".join(p.spoken for p in [*stream.push(text), *stream.flush()])


def load_lexicon(path: Path) -> dict[str, str]:
    """The file ``serve --lexicon FILE`` reads: UTF-8, one entry a line, the word, a tab, its
    spoken form ("Nguyen<TAB>win"); blank lines and lines starting with ``#`` are skipped.
    A word is one token (no whitespace), matched case-insensitively."""
    lexicon: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, tab, spoken = line.partition("\t")
        word, spoken = word.strip(), spoken.strip()
        if not tab or not word or not spoken or any(c.isspace() for c in word):
            raise ValueError(f"{path}:{number}: expected 'word<TAB>spoken form', got {line!r}")
        lexicon[word.lower()] = spoken
    return lexicon
