"""Text -> phonemes -> token ids, as Kokoro expects them: espeak-ng IPA with the clause
punctuation kept, hexgrad's post-processing (as in kokoro-js), only symbols in the vocabulary.

espeak-ng is reached through piper-tts's bridge (``piper.espeakbridge``), not ``phonemizer``:
piper-tts is already a dependency with its own espeak-ng build, so there is one espeak-ng in
the process, behind the one lock every voicews caller holds (espeak-ng keeps global state).
The bridge also reads the whole text at once, so numbers keep their decimal point ("3.50"),
where ``phonemizer`` cuts the text at every punctuation mark before espeak sees it.

Text is text: the bridge never enables espeak's ``[[phoneme]]`` input or SSML, and piper's
own ``[[ ]]`` handling (in ``PiperVoice.phonemize``) is not on this path.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata

from ..piper_words import ESPEAK_LOCK
from .assets import MAX_TOKENS, vocab

PAD = 0
"""Token id around every input: the model reads ``[PAD, *tokens, PAD]``."""

MAX_PHONEMES = 100
"""Phoneme tokens per inference at speed 1 (about 6 s of speech). The context takes
:data:`MAX_TOKENS`, but one such inference holds the compute worker, and every other session's
listener, for 10-20 s on two cores; 100 keeps most clauses whole and an inference near 2 s
(~0.2 s each plus ~19 ms a token, README). Slower speeds stretch every token: fewer there."""

SENTENCE_MARKS = ".!?"
CLAUSE_MARKS = ",;:"
PUNCTUATION = ';:,.!?\u00a1\u00bf\u2014\u2026"\u00ab\u00bb\u201c\u201d'
"""Punctuation as hexgrad's post-processing lists it (``_FIXES``): pauses and tone in the
phonemes, not sounds."""
# Title abbreviations espeak would end a sentence at ("Dr. Smith" -> "Doctor. Smith"), as
# hexgrad's kokoro normalizes them.
_TITLES = (
    (re.compile(r"\bD[Rr]\.(?= [A-Z])"), "Doctor"),
    (re.compile(r"\b(?:Mr\.|MR\.(?= [A-Z]))"), "Mister"),
    (re.compile(r"\b(?:Ms\.|MS\.(?= [A-Z]))"), "Miss"),
    (re.compile(r"\b(?:Mrs\.|MRS\.(?= [A-Z]))"), "Mrs"),
)
# hexgrad's post-processing of espeak's IPA (kokoro-js 1.2.1, Apache-2.0): symbols the model
# was not trained on mapped to ones it was, and "'s" joined back to its word.
_FIXES = (
    (re.compile("\u02b2"), "j"),  # palatalized: pˌiːʲˈɛm ("pm")
    (re.compile("r"), "\u0279"),
    (re.compile("x"), "k"),
    (re.compile("\u026c"), "l"),
    (re.compile("(?<=[a-z\u0279\u02d0])(?=h\u02c8\u028cnd\u0279\u026ad)"), " "),
    (re.compile(f" z(?=[{re.escape(PUNCTUATION)} ]|$)"), "z"),
)
_AMERICAN_FIXES = ((re.compile("(?<=n\u02c8a\u026an)ti(?!\u02d0)"), "di"),)  # "ninety"


def inference_budget(speed: float) -> int:
    """Phoneme tokens one inference may take at ``speed``: :data:`MAX_PHONEMES` at 1 and
    above, fewer below, as for Piper (:func:`voicews.engines.piper_words.inference_chunks`)."""
    return max(8, int(MAX_PHONEMES * min(speed, 1.0)))


def phonemize(text: str, language: str = "en-us", limit: int = MAX_TOKENS) -> list[str]:
    """The text's phonemes, one string per piece the model speaks in one pass: each sentence,
    cut at clauses, then words, where it is longer than ``limit`` (at most :data:`MAX_TOKENS`).
    Every symbol is in the vocabulary (one token each); text with nothing to say gives an
    empty list."""
    clauses = _espeak(_clean(text), language)
    fixes = _FIXES + (_AMERICAN_FIXES if language == "en-us" else ())
    known = vocab()
    sentences: list[list[str]] = [[]]
    for index, (phonemes, terminator, end_of_sentence) in enumerate(clauses):
        last = index == len(clauses) - 1
        if not terminator and not last:  # an ellipsis, a dash, a paragraph break
            terminator = "." if end_of_sentence else ","
        for pattern, replacement in fixes:
            phonemes = pattern.sub(replacement, phonemes)
        clause = "".join(c for c in phonemes + terminator if c in known).strip()
        if clause.strip(SENTENCE_MARKS + CLAUSE_MARKS):
            sentences[-1].append(clause)
        if end_of_sentence and sentences[-1]:
            sentences.append([])
    limit = min(limit, MAX_TOKENS)
    return [piece for sentence in sentences for piece in _fit(sentence, limit)]


def tokenize(phonemes: str) -> list[int]:
    """Token ids of phonemes from :func:`phonemize` (pads not included)."""
    table = vocab()
    return [table[p] for p in phonemes if p in table]


def _clean(text: str) -> str:
    """What espeak-ng cannot take (control characters, unpaired surrogates) becomes a space;
    line breaks become spaces (two of them still end a paragraph)."""
    text = "".join(
        " " if unicodedata.category(c) in ("Cc", "Cs") and c != "\n" else c for c in text
    )
    for pattern, replacement in _TITLES:
        text = pattern.sub(replacement, text)
    return text


@functools.cache
def _initialize() -> None:
    from piper import espeakbridge
    from piper.phonemize_espeak import ESPEAK_DATA_DIR

    espeakbridge.initialize(str(ESPEAK_DATA_DIR))


def _espeak(text: str, language: str) -> list[tuple[str, str, bool]]:
    """espeak-ng's clauses: (IPA with stress marks, terminator, ends a sentence)."""
    from piper import espeakbridge

    with ESPEAK_LOCK:
        _initialize()
        espeakbridge.set_voice(language)
        return espeakbridge.get_phonemes(text)


def _fit(clauses: list[str], limit: int) -> list[str]:
    """Join a sentence's clauses into pieces of at most ``limit`` symbols, cutting between
    clauses where it is too long, and a clause that is into near-equal pieces between words,
    mid-word as a last resort."""
    pieces: list[str] = []
    for clause in clauses:
        for part in [clause] if len(clause) <= limit else _split(clause, limit):
            if pieces and len(pieces[-1]) + 1 + len(part) <= limit:
                pieces[-1] += " " + part
            else:
                pieces.append(part)
    return pieces


def _split(clause: str, limit: int) -> list[str]:
    """A clause longer than ``limit`` as pieces of near-equal length (none over ``limit``),
    cut between words; a word longer than ``limit`` is cut itself."""
    target = math.ceil(len(clause) / math.ceil(len(clause) / limit))
    pieces: list[str] = []
    for word in clause.split():
        for atom in (word[i : i + limit] for i in range(0, len(word), limit)):
            joined = len(pieces[-1]) + 1 + len(atom) if pieces else limit + 1
            if joined <= limit and 2 * joined - len(atom) <= 2 * target:  # its middle fits
                pieces[-1] += " " + atom
            else:
                pieces.append(atom)
    return pieces
