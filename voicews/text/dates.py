"""Dates and times: numeric dates in the locale's order, ISO dates, clock times and spans,
and what a month beside a number makes of it."""

from __future__ import annotations

import re

from .numbers import Locale, cardinal, ordinal, year
from .tokens import Around, Token
from .vocabulary import MONTH_ABBREVIATIONS, MONTH_NAMES, MONTHS, TIME_SUFFIXES

DASH = r"[-\u2013]"
DATE = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})")
ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?((?i:[ap]\.?m\.?))?")
_CLOCK = r"\d{1,2}(?::\d{2}(?::\d{2})?)?(?i:[ap]\.?m\.?)?"
TIME_SPAN = re.compile(rf"({_CLOCK}){DASH}({_CLOCK})")
HOUR = re.compile(r"(\d{1,2})((?i:[ap]\.?m\.?))")


def read_date(core: str, token: Token, around: Around) -> str | None:
    m = DATE.fullmatch(core)
    if m is not None:
        a, b, y = int(m[1]), int(m[2]), m[3]
        month, day = month_day(a, b, around.locale)
        full_year = int(y) if len(y) == 4 else 2000 + int(y)
    elif (m := ISO_DATE.fullmatch(core)) is not None:
        full_year, month, day = int(m[1]), int(m[2]), int(m[3])
    else:
        return None
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return day_month(day, month, around.locale) + ", " + year(full_year, around.locale)


def month_day(a: int, b: int, locale: Locale) -> tuple[int, int]:
    """The month and day of a numeric date a/b: month first in en-US, day first in en-GB,
    unless only the other order is a date (25/12 in en-US, 12/25 in en-GB)."""
    us, gb = (a, b), (b, a)
    first, other = (us, gb) if locale == "en-US" else (gb, us)
    return other if first[0] > 12 and other[0] <= 12 else first


def day_month(day: int, month: int, locale: Locale) -> str:
    """A day of a month: "December fifth" (en-US), "the fifth of December" (en-GB)."""
    if locale == "en-US":
        return f"{MONTHS[month - 1]} {ordinal(day, locale)}"
    return f"the {ordinal(day, locale)} of {MONTHS[month - 1]}"


def read_time(core: str, token: Token, around: Around) -> str | None:
    """3:30 PM, 14:05, 7am, and a span of them (9:30-10:30, 3-4pm, 9am-5pm; 5-10 is a
    range of numbers)."""
    if (m := TIME_SPAN.fullmatch(core)) is not None and not (m[1].isdecimal() and m[2].isdecimal()):
        start, end = _clock_or_hour(m[1], around), _clock_or_hour(m[2], around)
        return None if start is None or end is None else f"{start} to {end}"
    return clock(core, around)


def _clock_or_hour(core: str, around: Around) -> str | None:
    """A span's end: a time, or a bare hour (the 3 of 3-4pm)."""
    if core.isdecimal():
        return cardinal(int(core)) if int(core) <= 24 else None
    return clock(core, around, spanned=True)


def clock(core: str, around: Around, spanned: bool = False) -> str | None:
    m = TIME.fullmatch(core)
    if m is None:
        m = HOUR.fullmatch(core)
        if m is None or not 1 <= int(m[1]) <= 12:
            return None
        return f"{cardinal(int(m[1]))} {_suffix(m[2])}"
    hour, minute = int(m[1]), int(m[2])
    if hour > 24 or minute > 59:
        return None
    suffix = _suffix(m[4]) if m[4] else ""
    later = spanned or (around.next is not None and around.next.core.lower() in TIME_SUFFIXES)
    if minute == 0:
        if suffix or later:
            words = cardinal(hour)
        else:
            words = cardinal(hour) + (" o'clock" if hour <= 12 else " hundred")
    elif minute < 10:
        words = f"{cardinal(hour)} oh {cardinal(minute)}"
    else:
        words = f"{cardinal(hour)} {cardinal(minute)}"
    if m[3] and int(m[3]):
        words += f" and {cardinal(int(m[3]))} seconds"
    return f"{words} {suffix}" if suffix else words


def _suffix(text: str) -> str:
    return TIME_SUFFIXES[text.lower().rstrip(".")]


def is_month(token: Token | None) -> bool:
    """A month's name or abbreviation, capitalized ("may" and "march" are verbs)."""
    if token is None or not token.core[:1].isupper():
        return False
    word = token.core.lower()
    return word in MONTH_NAMES or word in MONTH_ABBREVIATIONS
