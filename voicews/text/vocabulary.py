"""The words the normalizer reads symbols and abbreviations as: one table per class."""

from __future__ import annotations

from .numbers import Locale

MONTHS = (
    "January February March April May June July August September October November December"
).split()
MONTH_ABBREVIATIONS = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9,
    "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
MONTH_NAMES = {name.lower(): i for i, name in enumerate(MONTHS, 1)}

DAYS = {
    "mon": "Monday", "tue": "Tuesday", "tues": "Tuesday", "wed": "Wednesday",
    "thu": "Thursday", "thur": "Thursday", "thurs": "Thursday", "fri": "Friday",
    "sat": "Saturday", "sun": "Sunday",
}  # fmt: skip
WORD_DAYS = {"sat", "sun"}
"""Also English words: read as days only in a date ("Sat, Dec 3", "Sun 4th")."""

TITLES = {
    "mr": "Mister", "mrs": "Missus", "ms": "Miz", "prof": "Professor", "mt": "Mount",
    "capt": "Captain", "sgt": "Sergeant", "gov": "Governor", "sen": "Senator",
}  # fmt: skip
"""Before a name, with or without their dot (en-GB writes "Mr Smith")."""

STREET_OR_TITLE = {"dr": ("Drive", "Doctor"), "st": ("Street", "Saint")}
"""After a street's name, the first; before a name, the second."""

ABBREVIATIONS = {
    "etc": ("et cetera", True), "e.g": ("for example", False), "i.e": ("that is", False),
    "vs": ("versus", False), "approx": ("approximately", False), "jr": ("Junior", True),
    "sr": ("Senior", True), "ave": ("Avenue", True), "rd": ("Road", True),
    "blvd": ("Boulevard", True), "apt": ("apartment", False), "dept": ("department", True),
}  # fmt: skip
"""Spoken form, and whether the abbreviation can end a sentence (and keep its dot there)."""

TIME_SUFFIXES = {"am": "a.m", "a.m": "a.m", "pm": "p.m", "p.m": "p.m"}
"""After a time. espeak-ng reads "a.m" as letters in every context; "AM" before a comma or a
full stop is the verb, and "a m" is "uh em". The dot that ends a sentence is added after."""

CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "\u20ac": ("euro", "euros", "cent", "cents"),
    "\u00a3": ("pound", "pounds", "penny", "pence"),
    "\u00a5": ("yen", "yen", "", ""),
}
CURRENCY_WORDS = frozenset(name for names in CURRENCIES.values() for name in names[:2])
"""The currencies' names: "$4 million dollars" says them once."""
MAGNITUDES = {
    "k": "thousand", "K": "thousand", "M": "million", "m": "million", "mm": "million",
    "B": "billion", "b": "billion", "bn": "billion", "T": "trillion", "tn": "trillion",
}  # fmt: skip
"""After an amount ($2.5M, 800K); after a bare number only the capitals (5m is five metres)."""
SCALE_WORDS = frozenset(MAGNITUDES.values())
"""Written out after an amount ("$4.2 million"): the currency is said after them."""

# unit: singular, plural (en-US; en-GB respellings in BRITISH)
UNITS = {
    "mg": ("milligram", "milligrams"), "g": ("gram", "grams"), "kg": ("kilogram", "kilograms"),
    "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter",
    "centimeters"), "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"),
    "ft": ("foot", "feet"), "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"), "kph": ("kilometer per hour",
    "kilometers per hour"), "ml": ("milliliter", "milliliters"), "mL": ("milliliter",
    "milliliters"), "L": ("liter", "liters"), "KB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"), "Mbps": ("megabit per second", "megabits per second"),
    "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz",
    "megahertz"), "GHz": ("gigahertz", "gigahertz"), "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"), "secs": ("second", "seconds"), "min": ("minute", "minutes"),
    "mins": ("minute", "minutes"), "h": ("hour", "hours"), "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"), "kWh": ("kilowatt hour", "kilowatt hours"),
    "kW": ("kilowatt", "kilowatts"), "W": ("watt", "watts"), "V": ("volt", "volts"),
    "\u00b0F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "\u00b0C": ("degree Celsius", "degrees Celsius"), "\u00b0": ("degree", "degrees"),
}  # fmt: skip
BRITISH = {"meter": "metre", "liter": "litre"}


def unit(name: str, count: float | None, locale: Locale) -> str:
    """``unit("km", 300, "en-GB")`` -> "kilometres"; singular for exactly one."""
    singular, plural = UNITS[name]
    words = singular if count is not None and abs(count) == 1 else plural
    if locale == "en-GB":
        for us, gb in BRITISH.items():
            words = words.replace(us, gb)
    return words


SYMBOLS = {"&": "and", "+": "plus", "=": "equals", "@": "at", "#": "number", "%": "percent"}
SIGNS = {**SYMBOLS, ".": "point", "/": "slash", "-": "dash", "_": "underscore", ":": "colon"}
"""Inside a token that is no known class: a version number, an expression."""

ORDER_CUES = frozenset(
    """order ticket confirmation reference ref account invoice tracking case booking code pin
    id number no serial""".split()
)
"""A long number after these is an identifier, read digit by digit."""
YEAR_CUES = frozenset(
    """in since from by until till to of year before after during around circa early late mid
    between the class""".split()
)
"""A four-digit number after these is a year."""

TLDS = frozenset(
    "com org net io ai dev co uk us edu gov app me info biz ca de fr tv ly gg xyz au eu".split()
)

LETTERS = {"A": "eh"}
"""Spelled letters espeak-ng would read as a word: a lone "A" is the article, "uh"."""


def spell(letters: str) -> str:
    """``"XB"`` -> "X B": an identifier's letters, one by one."""
    return " ".join(LETTERS.get(c, c) for c in letters.upper())
