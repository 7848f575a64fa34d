"""Tokens with digits: amounts, dates, times, phone numbers, codes, units, ranges, plain
numbers. Each reader returns the spoken core, or None when the token is not its class."""

from __future__ import annotations

import re
from collections.abc import Callable

from .dates import DASH, day_month, is_month, month_day, read_date, read_time
from .numbers import (
    Locale,
    cardinal,
    decimal,
    digits,
    ordinal,
    plural,
    quantity,
    year,
)
from .tokens import Around, Token
from .vocabulary import (
    CURRENCIES,
    DAYS,
    MAGNITUDES,
    ORDER_CUES,
    SCALE_WORDS,
    SIGNS,
    UNITS,
    YEAR_CUES,
    spell,
    unit,
)

NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
SIGN = r"[-\u2212+]?"
_UNIT = "|".join(sorted((re.escape(u) for u in UNITS), key=len, reverse=True))
_MAGNITUDE = "|".join(sorted(MAGNITUDES, key=len, reverse=True))

PHONE = re.compile(r"(?:\+?(\d{1,3})[-.])?(\d{3})[-.](\d{3})[-.](\d{4})|(\d{3})-(\d{4})")
SLASH = re.compile(r"(\d{1,3})/(\d{1,3})")
MONEY = re.compile(
    rf"({SIGN})([$\u20ac\u00a3\u00a5])({NUM})({_MAGNITUDE})?"
    rf"(?:{DASH}[$\u20ac\u00a3\u00a5]?({NUM})({_MAGNITUDE})?)?"
)
MONEY_AFTER = re.compile(rf"({SIGN})({NUM})({_MAGNITUDE})?([\u20ac\u00a3])")
AMOUNT = re.compile(rf"({SIGN})({NUM})(?:{DASH}({NUM}))?(%|{_UNIT}|[KMBTk]|bn|[x\u00d7])?")
ORDINAL = re.compile(r"(\d+)(st|nd|rd|th)", re.IGNORECASE)
DECADE = re.compile(r"(\d{2}|\d{4})s")
HASH = re.compile(r"#([A-Za-z0-9-]+)")
CODE = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
RUNS = re.compile(r"[A-Za-z]+|\d+")
FALLBACK_RUNS = re.compile(r"\d+|[^\W\d_]+|\S")
WORD_DASH_NUMBER = re.compile(r"([A-Za-z]{3,})-(\d{1,2})")
PHONE_TAIL = re.compile(r"\d{3}-\d{4}")
PLAIN_INT = re.compile(r"\d+")


def read(token: Token, around: Around) -> str | None:
    core = token.core
    for reader in READERS:
        spoken = reader(core, token, around)
        if spoken is not None:
            return spoken
    return None


def _phone(core: str, token: Token, around: Around) -> str | None:
    m = PHONE.fullmatch(core)
    if m is None:
        return None
    plus = "plus " if core.startswith("+") else ""
    country = f"{plus}{digits(m[1])}, " if m[1] else ""
    return country + ", ".join(digits(g) for g in m.groups()[1:] if g)


def _slash(core: str, token: Token, around: Around) -> str | None:
    """24/7, fractions (3/4, 1/2), a day and month without year (12/25), else "a over b"."""
    if core == "24/7":
        return "twenty-four seven"
    m = SLASH.fullmatch(core)
    if m is None:
        return None
    a, b = int(m[1]), int(m[2])
    prev = around.prev
    mixed = prev is not None and not prev.trail and PLAIN_INT.fullmatch(prev.core) is not None
    dated = prev is not None and prev.core.lower() in DAYS
    if b and not dated and (a < b <= 10 or b in (16, 32, 64, 100) or mixed):
        words = fraction(a, b, around.locale)
        if mixed:
            return "and " + (words.replace("one ", "a ", 1) if a == 1 else words)
        return words
    month, day = month_day(a, b, around.locale)
    if 1 <= month <= 12 and 1 <= day <= 31:
        return day_month(day, month, around.locale)
    return f"{cardinal(a, around.locale)} over {cardinal(b, around.locale)}"


def fraction(a: int, b: int, locale: Locale) -> str:
    """3/4 -> "three quarters", 1/2 -> "one half", 5/8 -> "five eighths"."""
    names = {2: ("half", "halves"), 4: ("quarter", "quarters")}
    one, many = names.get(b) or (ordinal(b, locale), plural(ordinal(b, locale)))
    return f"{cardinal(a, locale)} {one if a == 1 else many}"


_Money = tuple[str, str, str, str | None, str | None, str | None]
"""An amount of money as written: sign, symbol, amount, magnitude, and a range's upper
amount and its magnitude."""


def _money_parts(core: str) -> _Money | None:
    """``core`` as an amount of money ("$4.2M", "-$5-10", "20€"); None if it is not one."""
    if (m := MONEY.fullmatch(core)) is not None:
        sign, symbol, amount, magnitude, upper, upper_magnitude = m.groups()
        return sign, symbol, amount, magnitude, upper, upper_magnitude
    if (m := MONEY_AFTER.fullmatch(core)) is not None:
        sign, amount, magnitude, symbol = m.groups()
        return sign, symbol, amount, magnitude, None, None
    return None


def _money(core: str, token: Token, around: Around) -> str | None:
    if (money := _money_parts(core)) is None:
        return None
    sign, symbol, amount, magnitude, upper, upper_magnitude = money
    one, many, cent, cents = CURRENCIES[symbol]
    words = "minus " if sign in ("-", "\u2212") else ""
    locale = around.locale
    if _scaled(token, around.next, magnitude, upper_magnitude):  # said by the scale word
        high = f" to {decimal(upper, locale)}" if upper is not None else ""
        return f"{words}{decimal(amount, locale)}{high}"
    if upper is not None:
        low = decimal(amount, locale) + (" " + MAGNITUDES[magnitude] if magnitude else "")
        high = decimal(upper, locale) + (
            " " + MAGNITUDES[upper_magnitude] if upper_magnitude else ""
        )
        return f"{words}{low} to {high} {many}"
    if magnitude:
        return f"{words}{decimal(amount, locale)} {MAGNITUDES[magnitude]} {many}"
    whole_text, _, fraction_text = amount.replace(",", "").partition(".")
    whole = int(whole_text or "0")
    if not cent or len(fraction_text) > 2:
        value = decimal(amount, locale)
        return f"{words}{value} {one if amount == '1' else many}"
    subunits = int(fraction_text.ljust(2, "0")) if fraction_text else 0
    parts = []
    if whole or not subunits:
        parts.append(f"{cardinal(whole, locale)} {one if whole == 1 else many}")
    if subunits:
        parts.append(f"{cardinal(subunits, locale)} {cent if subunits == 1 else cents}")
    return words + " and ".join(parts)


def _scaled(
    token: Token, nxt: Token | None, magnitude: str | None, upper_magnitude: str | None
) -> bool:
    """An amount of money a scale word follows ("$4.2 million"): said "four point two
    million dollars", the currency after the scale word (:func:`currency_before_scale`)."""
    scale = nxt is not None and not nxt.lead and nxt.core.lower() in SCALE_WORDS
    return scale and not token.trail and magnitude is None and upper_magnitude is None


def currency_before_scale(token: Token, scale: Token) -> str | None:
    """The currency a scale word says after it ("dollars" in "$4.2 million"), where
    ``token`` before it is an amount of money that leaves it unsaid; else None."""
    if (money := _money_parts(token.core)) is None:
        return None
    _, symbol, _, magnitude, _, upper_magnitude = money
    if not _scaled(token, scale, magnitude, upper_magnitude):
        return None
    return CURRENCIES[symbol][1]


def _ordinal(core: str, token: Token, around: Around) -> str | None:
    m = ORDINAL.fullmatch(core)
    if m is None:
        return None
    words = ordinal(int(m[1]), around.locale)
    if is_month(around.next) or (around.locale == "en-GB" and is_month(around.prev)):
        return "the " + words
    return words


def _decade(core: str, token: Token, around: Around) -> str | None:
    m = DECADE.fullmatch(core)
    if m is None or not m[1].endswith("0"):
        return None
    n = int(m[1])
    if len(m[1]) == 2:
        return plural(cardinal(n)) if n else None
    return plural(year(n, around.locale))


def _hash(core: str, token: Token, around: Around) -> str | None:
    m = HASH.fullmatch(core)
    if m is None:
        return None
    body = m[1]
    if body.isdecimal():
        return "number " + (digits(body) if len(body) >= 4 else cardinal(int(body)))
    return "number " + code(body)


def _amount(core: str, token: Token, around: Around) -> str | None:
    """Numbers, ranges, and what may follow them in the same token: %, a unit, a magnitude
    (1.5M), a multiplier (3x)."""
    m = AMOUNT.fullmatch(core)
    if m is None:
        return None
    sign, low, high, tail = m.groups()
    locale = around.locale
    if high is None and tail is None and "." not in low and "," not in low and not sign:
        return _integer(low, token, around)
    words = "minus " if sign in ("-", "\u2212") else "plus " if sign == "+" else ""
    if high is not None:
        if tail is None and all(len(n) == 4 and 1100 <= int(n) <= 2099 for n in (low, high)):
            words += f"{year(int(low), locale)} to {year(int(high), locale)}"
        else:
            words += f"{decimal(low, locale)} to {decimal(high, locale)}"
    else:
        words += decimal(low, locale)
    if tail is None:
        return words
    if tail == "%":
        return words + " percent"
    if tail in ("x", "\u00d7"):
        return words + " times"
    if tail in MAGNITUDES:
        return f"{words} {MAGNITUDES[tail]}"
    return f"{words} {unit(tail, quantity(high or low), locale)}"


def _integer(text: str, token: Token, around: Around) -> str:
    """A bare integer: an identifier after "order" or "#", a year where one is expected, a
    day beside a month, a phone number's area code, else a cardinal."""
    n, locale, prev, nxt = int(text), around.locale, around.prev, around.next
    prev_word = prev.core.lower() if prev is not None else ""
    if len(text) > 1 and text.startswith("0"):
        return digits(text)
    if (len(text) >= 4 and prev_word in ORDER_CUES) or prev_word in ("call", "dial"):
        return digits(text)
    if (
        token.lead.endswith("(")
        and token.trail.startswith(")")
        and len(text) == 3
        and (nxt is not None and PHONE_TAIL.fullmatch(nxt.core))
    ):
        return digits(text)
    if 1 <= n <= 31 and is_month(nxt):
        return "the " + ordinal(n, locale)
    if 1 <= n <= 31 and is_month(prev) and prev is not None and prev.trail in ("", "."):
        return ("" if locale == "en-US" else "the ") + ordinal(n, locale)
    if len(text) == 4 and 1100 <= n <= 2099 and _year_expected(token, around):
        return year(n, locale)
    return cardinal(n, locale)


def _year_expected(token: Token, around: Around) -> bool:
    prev = around.prev
    if prev is None or around.starts_sentence:
        return True
    return (
        prev.core.lower() in YEAR_CUES
        or is_month(prev)
        or bool(prev.trail and prev.core[:1].isdecimal())
        or (around.next is None or bool(token.trail))
    )


def _hyphenated(core: str, token: Token, around: Around) -> str | None:
    """Numbers joined to words: "24-hour", "1-on-1", "5-km" (a unit, singular: "a five
    kilometer run")."""
    parts = core.split("-")
    if len(parts) < 2 or not all(p.isdecimal() or (p.isalpha() and not p.isupper()) for p in parts):
        return None
    return " ".join(
        cardinal(int(p), around.locale)
        if p.isdecimal()
        else unit(p, 1, around.locale)
        if p in UNITS
        else p
        for p in parts
    )


def _code(core: str, token: Token, around: Around) -> str | None:
    if CODE.fullmatch(core) is None:
        return None
    return code(core)


def code(text: str) -> str:
    """An identifier as a person spells it: "A7X-92B" -> "eh seven X dash nine two B"; a
    letter with a short number, "B12", as "B twelve"; a word inside stays a word."""
    if m := WORD_DASH_NUMBER.fullmatch(text):
        return f"{m[1]} {cardinal(int(m[2]))}"
    runs = RUNS.findall(text)
    short = len(runs) == 2 and "-" not in text and any(r.isdecimal() and len(r) <= 2 for r in runs)
    groups = []
    for group in text.split("-"):
        words = []
        for run in RUNS.findall(group):
            if run.isdecimal():
                words.append(cardinal(int(run)) if short else digits(run))
            elif len(run) >= 4 or (len(run) >= 3 and run.islower()):
                words.append(run)
            else:
                words.append(spell(run))
        groups.append(" ".join(words))
    return " dash ".join(groups)


def _fallback(core: str, token: Token, around: Around) -> str | None:
    """Digits inside anything else (1+1=2, v2.0.1): each number read, each sign named."""
    words = []
    for run in FALLBACK_RUNS.findall(core):
        if run.isdecimal():
            words.append(cardinal(int(run), around.locale) if len(run) <= 3 else digits(run))
        elif run.isalpha():
            words.append(run)
        else:
            words.append(SIGNS.get(run, run))
    return " ".join(words)


Reader = Callable[[str, Token, Around], str | None]
READERS: tuple[Reader, ...] = (
    _phone,
    read_date,
    read_time,
    _slash,
    _money,
    _ordinal,
    _decade,
    _hash,
    _amount,
    _hyphenated,
    _code,
    _fallback,
)
