"""Tokens without digits that are not read as written: abbreviations by context, units and
AM/PM after a number, days and months in dates, emails, URLs and symbols."""

from __future__ import annotations

import re

from .dates import TIME, TIME_SPAN, is_month
from .numbers import digits, quantity
from .numeric import AMOUNT, PLAIN_INT, currency_before_scale
from .tokens import Around, Token, abbreviation_trail
from .vocabulary import (
    ABBREVIATIONS,
    CURRENCY_WORDS,
    DAYS,
    MONTH_ABBREVIATIONS,
    MONTH_NAMES,
    MONTHS,
    SCALE_WORDS,
    SIGNS,
    STREET_OR_TITLE,
    SYMBOLS,
    TIME_SUFFIXES,
    TITLES,
    TLDS,
    UNITS,
    WORD_DAYS,
    unit,
)

CONTEXT_WORDS = frozenset(
    [*STREET_OR_TITLE, *TITLES, *ABBREVIATIONS, *MONTH_ABBREVIATIONS, *DAYS, "no", "a.m", "p.m"]
)
"""Words read by what is around them, the next token included: they wait for it."""

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
URL = re.compile(
    r"(?i)((?:https?|ftp)://)?(www\.)?((?:[a-z0-9-]+\.)+([a-z]{2,}))(/[^\s?#]*)?([?#]\S*)?"
)
URL_PATH_SEGMENTS = 3
"""A person reads a link's host and the start of its path, not its query string."""
PARTS = re.compile(r"\d+|[^\W\d_]+|\S")


def waits_for_next(token: Token) -> bool:
    """Whether the reading of ``token`` depends on the token after it."""
    if token.verbatim:
        return False
    lower = token.core.lower()
    context = lower in CONTEXT_WORDS or lower in SCALE_WORDS  # "$4 million (dollars)"
    return context or any(c.isdecimal() for c in token.core)


def read(token: Token, around: Around) -> str | None:
    """The spoken form of ``token`` (lead, core and trail), or None to leave it as written."""
    core, lower = token.core, token.core.lower()
    after_number = core in UNITS or lower in TIME_SUFFIXES or lower in MONTH_NAMES
    if after_number and (spoken := _after_number(token, around)) is not None:
        return token.lead + spoken
    if lower in SCALE_WORDS and around.prev is not None:
        currency = currency_before_scale(around.prev, token)
        said = around.next is not None and around.next.core.lower() in CURRENCY_WORDS
        if currency is not None and not (said and not token.trail):
            return f"{token.lead}{core} {currency}{token.trail}"
    if lower in CONTEXT_WORDS and (spoken := _abbreviation(token, around)) is not None:
        return token.lead + spoken
    if not any(c in SYMBOLS for c in core):
        return None
    if core in SYMBOLS:
        return token.lead + SYMBOLS[core] + token.trail
    if core[0] in "#@" and core[1:].replace("_", "").isalnum():
        return token.lead + ("hashtag " if core[0] == "#" else "at ") + core[1:] + token.trail
    if any(c in "&+=" for c in core) and len(core) > 1:
        return token.lead + " ".join(_named(core, "&+=")) + token.trail
    return None


def link(core: str) -> str | None:
    """An email or a URL (with a scheme, ``www.`` or a known top-level domain) as a person
    reads it, digits and all; None for anything else."""
    if EMAIL.fullmatch(core):
        return email(core)
    if (m := URL.fullmatch(core)) and (m[1] or m[2] or m[4].lower() in TLDS):
        return url(m)
    return None


def _after_number(token: Token, around: Around) -> str | None:
    """Units ("2.5 mg" -> "milligrams") and "a.m." after the number they belong to."""
    prev, core, lower = around.prev, token.core, token.core.lower()
    if prev is None or prev.trail:
        return None
    if lower in TIME_SUFFIXES and (
        TIME.fullmatch(prev.core)
        or TIME_SPAN.fullmatch(prev.core)
        or (PLAIN_INT.fullmatch(prev.core) and 1 <= int(prev.core) <= 12)
    ):
        trail = abbreviation_trail(token, around) if "." in lower else token.trail
        return TIME_SUFFIXES[lower] + trail
    if core in UNITS and (m := AMOUNT.fullmatch(prev.core)) and m[4] is None:
        return unit(core, quantity(m[3] or m[2]), around.locale) + token.trail
    if is_month(token) and lower in MONTH_NAMES and _day_number(prev):
        return "of " + core + token.trail
    return None


def _abbreviation(token: Token, around: Around) -> str | None:
    core, lower, trail, nxt = token.core, token.core.lower(), token.trail, around.next
    dotted = trail.startswith(".")
    if lower in STREET_OR_TITLE and core[0].isupper():
        street, title = STREET_OR_TITLE[lower]
        if _after_street_name(around):
            return street + abbreviation_trail(token, around)
        if dotted or (nxt is not None and nxt.capitalized):
            return title + abbreviation_trail(token, around, can_end=False)
        return None
    if lower in TITLES and core[0].isupper() and nxt is not None and nxt.capitalized:
        return TITLES[lower] + abbreviation_trail(token, around, can_end=False)
    if lower in ABBREVIATIONS and (dotted or lower in ("etc", "vs")):
        spoken, can_end = ABBREVIATIONS[lower]
        return spoken + abbreviation_trail(token, around, can_end)
    if lower in MONTH_ABBREVIATIONS and core[0].isupper():
        in_date = (nxt is not None and nxt.core[:1].isdecimal()) or _day_number(around.prev)
        if not in_date:
            return None
        month = MONTHS[MONTH_ABBREVIATIONS[lower] - 1]
        of = "of " if _day_number(around.prev) else ""
        return of + month + abbreviation_trail(token, around)
    if lower in DAYS and core[0].isupper():
        in_date = trail[:1] in (",", ".") or (
            nxt is not None
            and (nxt.core[:1].isdecimal() or nxt.core.lower() in MONTH_ABBREVIATIONS)
        )
        if lower in WORD_DAYS and not in_date:
            return None
        return DAYS[lower] + abbreviation_trail(token, around)
    if lower == "no" and dotted and nxt is not None and nxt.core[:1].isdecimal():
        return ("number" if core == "no" else "Number") + trail[1:]
    return None


def _after_street_name(around: Around) -> bool:
    """A street's name comes before: "221 Baker St.", "Main St. is closed"; not in "Visit
    St. Louis"."""
    prev, nxt = around.prev, around.next
    if prev is None or prev.trail:
        return False
    if prev.core[:1].isdecimal():
        return True
    named = prev.capitalized
    return named and (not around.prev_starts_sentence or nxt is None or not nxt.capitalized)


def _day_number(token: Token | None) -> bool:
    """A day of the month written before its month: "3 Dec", "3rd December"."""
    if token is None or token.trail:
        return False
    number = token.core.lower().removesuffix("st").removesuffix("nd").removesuffix("rd")
    number = number.removesuffix("th")
    return number.isdecimal() and 1 <= int(number) <= 31


def email(text: str) -> str:
    """``jane.doe@example.com`` -> "jane dot doe at example dot com"."""
    local, _, domain = text.partition("@")
    return " ".join(_named(local, "._+-")) + " at " + " dot ".join(domain.split("."))


def url(m: re.Match[str]) -> str:
    """``https://www.example.com/pricing?x=1`` -> "example dot com slash pricing": the host and
    the first few path segments, as the segmenter reads a link."""
    spoken = " dot ".join(m[3].split("."))
    segments = [s for s in (m[5] or "").split("/") if s][:URL_PATH_SEGMENTS]
    for segment in segments:
        spoken += " slash " + " ".join(_named(segment, "._-"))
    return spoken


def _named(text: str, signs: str) -> list[str]:
    """``text``'s words as they are, its digits one by one, and the signs in ``signs``
    named ("dot", "underscore", "and", ...)."""
    words = []
    for part in PARTS.findall(text):
        if part.isdecimal():
            words.append(digits(part))
        elif part in signs:
            words.append("dot" if part == "." else SIGNS[part])
        else:
            words.append(part)
    return words
