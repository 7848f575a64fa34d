"""Structured logs: one line per event, ``event=... key=value ...`` (logfmt), never a secret.

A client's token arrives in a query value or an ``Authorization`` header, and uvicorn and
``websockets`` log requests in several shapes (the request line, one line per header at DEBUG,
the ASGI scope at TRACE). Rather than trust every logger to leave them out, every log record
the process makes is redacted as it is made: each query value and each ``Authorization``
value, whole, whatever the key's spelling (``%74oken`` is ``token`` to the parser).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

log = logging.getLogger("voicews")

_REDACTED = "[redacted]"
# A quoted value, in the repr of a scope, a header list or a dict: 'authorization': b'...'.
_QUOTED = re.compile(
    r"""(?i)((?:authorization|query_string)['"]?\s*[:,=]\s*b?)(['"])(?:\\.|(?!\2).)*\2"""
)
# A header line: "authorization: Bearer ..." up to the end of the line.
_HEADER = re.compile(
    r"""(?im)(authorization\s*:[ \t]*)(?![ \t]*(?:b?['"]|\[redacted\]))\S[^\r\n]*"""
)
# A query value: after ? or &, up to &, #, whitespace, or a quote that closes a string.
_QUERY = re.compile(r"""(?<=[?&])([^=&#\s"']*=)(?:[^&#\s"']|["'](?![\s,)\]}:]|$))+""")


def redact(text: str) -> str:
    """``text`` with every query value and ``Authorization`` value replaced, whole."""
    text = _QUOTED.sub(rf"\1\2{_REDACTED}\2", text)
    text = _HEADER.sub(rf"\1{_REDACTED}", text)
    return _QUERY.sub(rf"\1{_REDACTED}", text)


def redact_secrets() -> None:
    """Redact every log record the process makes from now on, whatever logger makes it
    (uvicorn's, ``websockets``'s, ours, a library's); idempotent."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacts", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging reports it when the record is emitted
            return record
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    redacting: Callable[..., logging.LogRecord] = make
    redacting.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting)


def event(name: str, level: int = logging.INFO, **fields: object) -> None:
    parts = [f"event={name}"]
    for key, value in fields.items():
        if value is None:
            continue
        text = str(value)
        if not text or any(c in text for c in ' "=\n'):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        parts.append(f"{key}={text}")
    log.log(level, " ".join(parts))
