"""Structured logs: one line per event, ``event=... key=value ...`` (logfmt)."""

from __future__ import annotations

import logging
import re

log = logging.getLogger("voicews")
_SECRETS = re.compile(r"(?i)(authorization:\s*\w+\s+|[?&]token=)[^&\s]+")


class RedactSecrets(logging.Filter):
    """Blank bearer tokens out of log lines, including the WebSocket handshake that the
    protocol layer logs at DEBUG level."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _SECRETS.sub(r"\1[redacted]", message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def redact_server_logs() -> None:
    """Install the filter on every logger the server writes through (idempotent)."""
    for name in ("voicews", "uvicorn", "uvicorn.error", "uvicorn.access", "websockets"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecrets) for f in logger.filters):
            logger.addFilter(RedactSecrets())


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
