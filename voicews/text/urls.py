"""URLs as they are read aloud: host and path, shortened; each still one word."""

from __future__ import annotations

import re

from .segmenter import TRAILING_MARKS

_URL = re.compile(r"(?i)(?<![\w@.+-])(?:[a-z][a-z0-9+.-]*://|www\.)\S*")
_URL_PREFIX = re.compile(r"(?i)^(?:[a-z][a-z0-9+.-]*://)?(?:[^/@?#]*@)?(?:www\.)?")
URL_CHARS = 40
"""Longest reading of a URL; see :func:`speakable`."""


def speakable(text: str) -> str:
    """``text`` as it is read aloud: each URL (``scheme://...`` or ``www....``) as its host
    and path, without scheme, credentials, query or fragment, cut at a ``/`` or ``.`` to at
    most ``URL_CHARS`` characters. Three thousand characters of URL read out is not what a
    listener wants, and each is one word still, so word timings keep their places."""
    return _URL.sub(_read_url, text)


def _read_url(match: re.Match[str]) -> str:
    url = match.group()
    core = url.rstrip(TRAILING_MARKS)
    path = re.split(r"[?#]", _URL_PREFIX.sub("", core), maxsplit=1)[0].rstrip("/")
    if len(path) > URL_CHARS:
        cut = max(path.rfind("/", 0, URL_CHARS + 1), path.rfind(".", 0, URL_CHARS + 1))
        path = path[: cut if cut > 0 else URL_CHARS]
    return (path or core[:URL_CHARS]) + url[len(core) :]
