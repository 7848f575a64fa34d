"""Where derived files live (converted weights and models, voices patched for alignments).

``$VOICEWS_CACHE_DIR``, else ``~/.cache/voicews``. Entries are keyed by what they were made
from, and written to a temporary name then renamed, so concurrent servers never read half.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CACHE_ENV = "VOICEWS_CACHE_DIR"


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "voicews"


def content_key(path: Path) -> str:
    """A short digest of the file's bytes: an edited file (even at the same path) is new."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def file_key(path: Path) -> str:
    """A short digest of where the file is, its size and its modification time: cheap where
    hashing the content at every start would not be."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
