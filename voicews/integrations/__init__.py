"""Native streaming adapters for voice-agent frameworks, each behind its own extra.

- :mod:`voicews.integrations.pipecat`: ``VoicewsTTSService``, a Pipecat ``WebsocketTTSService``
  (``pip install 'voicews[pipecat]'``);
- :mod:`voicews.integrations.livekit`: ``TTS``, a LiveKit Agents ``tts.TTS``
  (``pip install 'voicews[livekit]'``).

Home Assistant speaks Wyoming, which the server itself serves (:mod:`voicews.dialects.wyoming`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

PCM_FORMAT = "pcm_s16le"


def session_url(url: str, sample_rate: int) -> str:
    """The realtime URL asking for audio at ``sample_rate`` (servers that cannot convert
    answer their own rate in ``session_created``, which is the rate to trust)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("sample_rate", "format")]
    query += [("sample_rate", str(sample_rate)), ("format", PCM_FORMAT)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
