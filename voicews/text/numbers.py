"""Numbers as words, the way each locale says them: num2words does the arithmetic, this module
the conventions num2words lacks (American "one hundred five", years, digit strings, decimals)."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from num2words import num2words

Locale = Literal["en-US", "en-GB"]

DIGITS = "zero one two three four five six seven eight nine".split()
MAX_DIGITS = 15
"""Longer digit runs are read digit by digit: nobody says a quadrillion out loud."""


@lru_cache(maxsize=4096)
def cardinal(n: int, locale: Locale = "en-US") -> str:
    """``1234`` -> "one thousand two hundred thirty-four" (en-GB: "... and thirty-four")."""
    if n < 0:
        return "minus " + cardinal(-n, locale)
    if len(str(n)) > MAX_DIGITS:
        return digits(str(n))
    return _locale_words(num2words(n, lang="en"), locale)


@lru_cache(maxsize=1024)
def ordinal(n: int, locale: Locale = "en-US") -> str:
    """``21`` -> "twenty-first"."""
    return _locale_words(num2words(n, lang="en", to="ordinal"), locale)


def _locale_words(words: str, locale: Locale) -> str:
    """num2words writes British: "one thousand, two hundred and five". Americans drop the
    "and"; nobody says the comma."""
    words = words.replace(",", "")
    return words.replace(" and ", " ") if locale == "en-US" else words


def digits(run: str) -> str:
    """``"0482"`` -> "zero four eight two": codes and phone numbers, read digit by digit."""
    return " ".join(DIGITS[int(c)] for c in run if c.isdecimal())


def decimal(text: str, locale: Locale = "en-US") -> str:
    """``"3.14"`` -> "three point one four"; ``"1,250.5"`` -> "one thousand two hundred
    fifty point five"; a leading minus (hyphen or U+2212) is "minus"."""
    sign = ""
    if text[:1] in ("-", "\u2212"):
        sign, text = "minus ", text[1:]
    whole, _, fraction = text.replace(",", "").partition(".")
    words = cardinal(int(whole or "0"), locale)
    if fraction:
        words += " point " + digits(fraction)
    return sign + words


def year(n: int, locale: Locale = "en-US") -> str:
    """``1999`` -> "nineteen ninety-nine", ``2026`` -> "twenty twenty-six", ``2005`` -> "two
    thousand five", ``1900`` -> "nineteen hundred", ``1905`` -> "nineteen oh five"."""
    if not 1000 <= n <= 9999:
        return cardinal(n, locale)
    high, low = divmod(n, 100)
    if 2000 <= n < 2010 or n % 1000 == 0:
        return cardinal(n, locale)
    if low == 0:
        return cardinal(high, locale) + " hundred"
    if low < 10:
        return cardinal(high, locale) + " oh " + DIGITS[low]
    return cardinal(high, locale) + " " + cardinal(low, locale)


def plural(words: str) -> str:
    """The number word as a plural noun: "ninety" -> "nineties", "hundred" -> "hundreds"
    (for decades: "the 90s", "the 1900s")."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + "s"


def quantity(text: str) -> float | None:
    """The value of a plain number (``"2.5"``, ``"1,000"``, ``"-3"``), for a unit's
    singular or plural; None for anything else."""
    try:
        return float(text.replace(",", "").replace("\u2212", "-"))
    except ValueError:
        return None
