"""The ElevenLabs dialect's ``output_format``: raw PCM and G.711 pass through as the session
frames them; MP3 (the cloud's default, and LiveKit's plugin's) is one stream per context turn,
encoded as the frames come, finished when the turn is spoken so its tail is not held back."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..encoding import ContainerEncoder, Encoding, OutputFormat
from ..errors import ErrorCode, VoicewsError
from ..protocol.client import SAMPLE_RATES

_RAW: dict[str, tuple[int, Encoding]] = {
    **{f"pcm_{rate}": (rate, "pcm_s16le") for rate in SAMPLE_RATES},  # ElevenLabs' are ours
    "ulaw_8000": (8000, "pcm_mulaw"),
    "alaw_8000": (8000, "pcm_alaw"),
}
_MP3 = re.compile(r"^mp3_(22050|44100)_(32|64|96|128|192)$")
MP3_FORMATS = ("mp3_22050_32", "mp3_44100_32", "mp3_44100_64", "mp3_44100_96", "mp3_44100_128",
               "mp3_44100_192")  # fmt: skip
DEFAULT = "mp3_44100_128"
"""The cloud's default: a client that names no format gets what it would get there."""


@dataclass(frozen=True, slots=True)
class AudioFormat:
    """What the session produces, and the MP3 bit rate its frames are encoded at (None: raw)."""

    session: OutputFormat
    mp3_bit_rate: int | None = None


def parse_format(name: str) -> AudioFormat:
    """An ``output_format`` value; one not served is ``invalid_request``."""
    if name in _RAW:
        rate, encoding = _RAW[name]
        return AudioFormat(OutputFormat(rate, encoding))
    if (match := _MP3.match(name)) is not None:
        return AudioFormat(OutputFormat(int(match[1]), "pcm_f32le"), int(match[2]) * 1000)
    allowed = ", ".join([*_RAW, *MP3_FORMATS])
    raise VoicewsError(
        ErrorCode.INVALID_REQUEST, f"output_format {name!r} is not served; choose {allowed}"
    )


class ContextAudio:
    """Each context's audio as the client asked for it: frames through as they are, or each
    context's turn encoded as one MP3 stream (a context's next turn starts a new one, which
    decoders take as the same stream: MP3 frames stand alone)."""

    def __init__(self, audio: AudioFormat) -> None:
        self._audio = audio
        self._encoders: dict[str | None, ContainerEncoder] = {}

    def frame(self, key: str | None, pcm: bytes) -> bytes:
        """One session frame of ``key``'s context in; the bytes to send out (maybe none yet)."""
        bit_rate = self._audio.mp3_bit_rate
        if bit_rate is None:
            return pcm
        encoder = self._encoders.get(key)
        if encoder is None:
            rate = self._audio.session.sample_rate
            encoder = self._encoders[key] = ContainerEncoder("mp3", rate, bit_rate)
        return encoder.push(pcm)

    def finish(self, key: str | None) -> bytes:
        """``key``'s turn is spoken: what its encoder still holds."""
        encoder = self._encoders.pop(key, None)
        return b"" if encoder is None else encoder.finish()

    def drop(self, key: str | None) -> None:
        """``key``'s turn was cut or its context closed: what its encoder holds is not heard
        (the encoder is still closed, not left to the collector)."""
        if (encoder := self._encoders.pop(key, None)) is not None:
            encoder.finish()
