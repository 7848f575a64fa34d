"""Structured logs: one line per event, ``event=... key=value ...`` (logfmt)."""

from __future__ import annotations

import logging

log = logging.getLogger("voicews")


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
