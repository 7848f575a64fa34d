"""Who may open a session: bearer tokens and a browser Origin allow-list.

Pure functions over request headers and query; the app turns a refusal into an HTTP status
before the WebSocket is accepted. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from .errors import ErrorCode, VoicewsError

TOKENS_ENV = "VOICEWS_TOKENS"


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    tokens: frozenset[str] = frozenset()
    """Accepted bearer tokens; empty means no authentication."""
    allowed_origins: frozenset[str] = frozenset()
    """Accepted ``Origin`` headers (exact, e.g. ``https://app.example``); empty allows any
    well-formed one. Requests without an Origin (non-browser clients) and the server's own
    origins are always allowed; a malformed Origin never is."""
    own_origins: frozenset[str] = frozenset()
    """The bundled web page's origins, from the address the server is bound to (see
    :func:`own_origins`), never from the request's ``Host``: a page on a rebound name
    (``http://evil.example:PORT`` resolving to us) is not us."""


def load_tokens(token_file: str | None = None) -> frozenset[str]:
    """Tokens from ``$VOICEWS_TOKENS`` (comma-separated) and a file (one per line)."""
    tokens = {t.strip() for t in os.environ.get(TOKENS_ENV, "").split(",")}
    if token_file:
        tokens |= {line.strip() for line in Path(token_file).read_text().splitlines()}
    return frozenset(t for t in tokens if t and not t.startswith("#"))


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://(\[[0-9a-f:.]+\]|[a-z0-9_.~-]+)(:[0-9]{1,5})?", re.I)
"""An origin as a browser serializes it (RFC 6454): scheme, host (an IDN in its ASCII form)
and port, nothing else: no path, no user, no second value, no space."""


def origin_allowed(policy: AccessPolicy, origin: str) -> bool:
    """Whether a request whose ``Origin`` header is ``origin`` may proceed. Two headers reach
    here joined by a comma (see :func:`voicews.asgi.headers_of`), so they are malformed too:
    one answer (403) for every Origin that is malformed or not allowed."""
    if origin != "null" and not (origin.isascii() and _ORIGIN.fullmatch(origin)):
        return False
    allowed = policy.allowed_origins
    return not allowed or origin in allowed or origin in policy.own_origins


def check(policy: AccessPolicy, headers: dict[str, str], query: bytes) -> VoicewsError | None:
    """None if the request may proceed, else the HTTP refusal (no secret in the reason)."""
    origin = headers.get("origin")
    if origin is not None and not origin_allowed(policy, origin):
        return VoicewsError(ErrorCode.ORIGIN_NOT_ALLOWED, "origin not allowed")
    if not policy.tokens:
        return None
    offered = _bearer(headers.get("authorization", "")) or _query_token(query)
    if offered is None:
        return VoicewsError(
            ErrorCode.UNAUTHORIZED,
            "missing bearer token (Authorization header or token query parameter)",
        )
    if not any(hmac.compare_digest(offered.encode(), t.encode()) for t in policy.tokens):
        return VoicewsError(ErrorCode.UNAUTHORIZED, "invalid token")
    return None


def offers_token(headers: dict[str, str], query: bytes) -> bool:
    """Whether the request offers a token at all (right or wrong)."""
    return (_bearer(headers.get("authorization", "")) or _query_token(query)) is not None


def own_origins(host: str, port: int) -> frozenset[str]:
    """The origins a page served by a server bound to ``host:port`` has: that address, and the
    loopback names for a loopback or wildcard bind. Behind a proxy or under a DNS name the
    page's origin is the public one: list it with ``--allow-origin``."""
    wildcard = host in ("", "0.0.0.0", "::")
    loopback = wildcard or host in ("localhost", "::1") or host.startswith("127.")
    hosts = set() if wildcard else {f"[{host}]" if ":" in host else host}
    if loopback:
        hosts |= {"localhost", "127.0.0.1", "[::1]"}
    suffix = "" if port == 80 else f":{port}"
    return frozenset(f"http://{name}{suffix}" for name in hosts)


def _bearer(value: str) -> str | None:
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _query_token(query: bytes) -> str | None:
    values = parse_qs(query.decode("latin-1")).get("token")
    return values[0] if values else None
