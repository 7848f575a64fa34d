"""What the Wyoming dialect tells about itself: its URI, and the ``describe`` answer (one
streaming TTS program, with the voices a session may choose and the language of each)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice

from .. import __version__
from ..engines import KOKORO_ENGINES
from ..engines.piper import bundled_voice

_PIPER = Attribution(name="rhasspy", url="https://github.com/rhasspy/piper")
_KOKORO = Attribution(name="hexgrad", url="https://huggingface.co/hexgrad/Kokoro-82M")
_LOCALES = {"en-us": "en_US", "en": "en_GB"}
"""Home Assistant's language codes for the espeak-ng languages Kokoro's voices speak."""


def parse_uri(uri: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` (the only transport served) as host and port."""
    parts = urlsplit(uri)
    if parts.scheme != "tcp" or parts.hostname is None or parts.port is None:
        raise ValueError(f"Wyoming URI must be tcp://HOST:PORT, not {uri!r}")
    return parts.hostname, parts.port


def describe(engine: str, voices: Sequence[str], voice_file: Path | None = None) -> Info:
    """What ``describe`` answers: one TTS program that streams, with the voices a session may
    choose (``engine_voices``, the default first) and the language each speaks: a Kokoro
    voice's from its name, a Piper voice's from the ``.onnx.json`` beside ``voice_file``."""
    if engine in KOKORO_ENGINES:
        from ..engines.kokoro.assets import language

        spoken = [(name, _KOKORO, _LOCALES[language(name)]) for name in voices]
    else:
        path = voice_file or bundled_voice()
        config = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
        code = config.get("language", {}).get("code") or config.get("espeak", {}).get("voice")
        spoken = [(voices[0], _PIPER, code or "en")]
    return Info(
        tts=[
            TtsProgram(
                name="voicews",
                description="Realtime streaming text to speech for voice agents",
                attribution=Attribution(name="voicews", url=""),
                installed=True,
                version=__version__,
                voices=[
                    TtsVoice(
                        name=name,
                        description=name,
                        attribution=attribution,
                        installed=True,
                        version=None,
                        languages=[language],
                    )
                    for name, attribution, language in spoken
                ],
                supports_synthesize_streaming=True,
            )
        ]
    )
