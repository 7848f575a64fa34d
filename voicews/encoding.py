"""Audio out in the format the caller needs: resampled, encoded, framed. No sockets, no asyncio.

:class:`FrameEncoder` is one realtime turn's way out: the engine's float32 at its own rate in,
frames in the session's ``(sample_rate, format)`` out, each with its exact sample count, so every
position on the wire counts samples at the output rate. :class:`ContainerEncoder` streams one
``POST /v1/audio/speech`` body (mp3, Ogg Opus, AAC, FLAC, WAV, raw PCM) as it is produced.

Resampling is python-soxr's streaming resampler (one stream per turn; its output is aligned
with its input, so positions map by the rate ratio alone); codecs and containers are FFmpeg's
through PyAV; G.711 is the classic table-free algorithm, vectorised into lookup tables.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, get_args

import av
import numpy as np
import numpy.typing as npt
import soxr

from .audio import Audio, from_pcm16, to_pcm16

OPUS_FRAME = 960
"""Samples per Opus packet: 20 ms at 48 kHz, one packet per realtime frame."""
OPUS_BITRATE = 32_000
_EMPTY: Audio = np.zeros(0, dtype=np.float32)

Chunk = tuple[bytes, int]
"""Encoded bytes and the samples they decode to, at the output rate."""

Encoding = Literal["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw", "opus"]
"""How audio frames encode samples: PCM16 (the default), float32, G.711 mu-law or A-law (one
byte per sample), or Opus (one 20 ms packet per frame, 48 kHz)."""
ENCODINGS: tuple[str, ...] = get_args(Encoding)
OPUS_RATE = 48_000


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """What a session's frames carry: samples per second and how each is encoded."""

    sample_rate: int
    format: Encoding = "pcm_s16le"

    def updated(self, sample_rate: int | None, format: Encoding | None) -> OutputFormat:
        """This format with the given fields changed. Opus is 48 kHz only: choosing it sets
        that rate, and any other rate alongside it is refused (ValueError)."""
        encoding = format or self.format
        rate = sample_rate or self.sample_rate
        if encoding == "opus":
            if sample_rate not in (None, OPUS_RATE):
                raise ValueError(f"audio.sample_rate: format opus is {OPUS_RATE} Hz only")
            rate = OPUS_RATE
        return OutputFormat(rate, encoding)


# --- G.711 ------------------------------------------------------------------------------


def _mulaw_table() -> npt.NDArray[np.uint8]:
    """mu-law code of every 16-bit sample (ITU-T G.711, as Sun's g711.c and audioop do)."""
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 2  # 14-bit
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(pcm), 8159) + 0x21
    segment = np.searchsorted([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], magnitude)
    code = np.where(segment >= 8, 0x7F, (segment << 4) | ((magnitude >> (segment + 1)) & 0xF))
    table: npt.NDArray[np.uint8] = (code ^ mask).astype(np.uint8)
    return table


def _alaw_table() -> npt.NDArray[np.uint8]:
    """A-law code of every 16-bit sample (ITU-T G.711, even bits inverted)."""
    pcm = np.arange(-32768, 32768, dtype=np.int32) >> 3  # 13-bit
    mask = np.where(pcm >= 0, 0xD5, 0x55)
    magnitude = np.where(pcm >= 0, pcm, -pcm - 1)
    segment = np.searchsorted([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], magnitude)
    shift = np.where(segment < 2, 1, segment)
    code = np.where(segment >= 8, 0x7F, (segment << 4) | ((magnitude >> shift) & 0xF))
    table: npt.NDArray[np.uint8] = (code ^ mask).astype(np.uint8)
    return table


def _mulaw_decode_table() -> npt.NDArray[np.int16]:
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = (((code & 0xF) << 3) + 0x84) << ((code & 0x70) >> 4)
    return np.where(code & 0x80, 0x84 - magnitude, magnitude - 0x84).astype("<i2")


def _alaw_decode_table() -> npt.NDArray[np.int16]:
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (code & 0x70) >> 4
    magnitude = ((code & 0xF) << 4) + np.where(segment == 0, 8, 0x108)
    magnitude = np.where(segment > 1, magnitude << np.maximum(segment - 1, 0), magnitude)
    return np.where(code & 0x80, magnitude, -magnitude).astype("<i2")


_MULAW, _ALAW = _mulaw_table(), _alaw_table()
_MULAW_DECODE, _ALAW_DECODE = _mulaw_decode_table(), _alaw_decode_table()


def _int16(audio: Audio) -> npt.NDArray[np.int16]:
    return np.frombuffer(to_pcm16(audio), dtype="<i2")


def mulaw_encode(audio: Audio) -> bytes:
    return _MULAW[_int16(audio).astype(np.int32) + 32768].tobytes()


def alaw_encode(audio: Audio) -> bytes:
    return _ALAW[_int16(audio).astype(np.int32) + 32768].tobytes()


def f32_encode(audio: Audio) -> bytes:
    return np.clip(audio, -1.0, 1.0).astype("<f4").tobytes()


def decode_pcm(data: bytes, encoding: Encoding) -> Audio:
    """Frames' bytes back to float32, for clients and tests; Opus needs :class:`OpusDecoder`."""
    match encoding:
        case "pcm_s16le":
            return from_pcm16(data)
        case "pcm_f32le":
            return np.frombuffer(data, dtype="<f4").astype(np.float32)
        case "pcm_mulaw":
            return from_pcm16(_MULAW_DECODE[np.frombuffer(data, dtype=np.uint8)].tobytes())
        case "pcm_alaw":
            return from_pcm16(_ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)].tobytes())
        case "opus":
            raise ValueError("opus frames are packets: decode them with OpusDecoder")


_PCM_ENCODERS: dict[Encoding, Callable[[Audio], bytes]] = {
    "pcm_s16le": to_pcm16,
    "pcm_f32le": f32_encode,
    "pcm_mulaw": mulaw_encode,
    "pcm_alaw": alaw_encode,
}


# --- Opus packets -----------------------------------------------------------------------


def opus_packet_samples(packet: bytes) -> int:
    """Samples at 48 kHz a packet decodes to, from its TOC byte (RFC 6716, section 3.1)."""
    config, code = packet[0] >> 3, packet[0] & 3
    if config < 12:  # SILK: 10, 20, 40, 60 ms
        tenths = (100, 200, 400, 600)[config % 4]
    elif config < 16:  # hybrid: 10, 20 ms
        tenths = (100, 200)[config % 2]
    else:  # CELT: 2.5, 5, 10, 20 ms
        tenths = (25, 50, 100, 200)[config % 4]
    frames = 1 if code == 0 else 2 if code < 3 else packet[1] & 0x3F
    return frames * tenths * OPUS_RATE // 10_000


class _OpusPackets:
    """Raw Opus packets (no Ogg), 20 ms each, as WebRTC and WebCodecs take them."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "w")
        assert isinstance(codec, av.AudioCodecContext)
        codec.sample_rate, codec.layout, codec.format = OPUS_RATE, "mono", "flt"
        codec.bit_rate = OPUS_BITRATE
        codec.time_base = Fraction(1, OPUS_RATE)
        codec.open()
        self._codec = codec
        self._pending = _EMPTY
        self._pts = 0
        self.delay = _opus_pre_skip(codec.extradata)
        """The encoder's lookahead: decoded audio starts with this many samples before the
        input's first, so positions in the turn are input positions plus this."""

    def push(self, audio: Audio) -> list[Chunk]:
        pending = np.concatenate([self._pending, audio]) if self._pending.size else audio
        whole = pending.size - pending.size % OPUS_FRAME
        self._pending = pending[whole:]
        out: list[Chunk] = []
        for start in range(0, whole, OPUS_FRAME):
            out += self._encode(pending[start : start + OPUS_FRAME])
        return out

    def finish(self) -> list[Chunk]:
        """The last partial packet padded with silence, then the lookahead's packets."""
        out: list[Chunk] = []
        if self._pending.size:
            padded = np.zeros(OPUS_FRAME, dtype=np.float32)
            padded[: self._pending.size] = self._pending
            self._pending = _EMPTY
            out += self._encode(padded)
        return out + self._packets(self._codec.encode(None))

    def _encode(self, samples: Audio) -> list[Chunk]:
        frame = av.AudioFrame.from_ndarray(
            np.clip(samples, -1.0, 1.0).reshape(1, -1), format="flt", layout="mono"
        )
        frame.sample_rate, frame.pts = OPUS_RATE, self._pts
        self._pts += samples.size
        return self._packets(self._codec.encode(frame))

    @staticmethod
    def _packets(packets: list[av.Packet[Any]]) -> list[Chunk]:
        return [(data, opus_packet_samples(data)) for data in map(bytes, packets)]


def _opus_pre_skip(extradata: bytes | None) -> int:
    """The pre-skip field of the OpusHead the encoder writes (RFC 7845, section 5.1)."""
    assert extradata is not None and extradata[:8] == b"OpusHead"
    pre_skip: int = struct.unpack_from("<H", extradata, 10)[0]
    return pre_skip


class OpusDecoder:
    """Decodes a turn's Opus frames (one packet each) to float32 at 48 kHz."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("opus", "r")  # FFmpeg's own decoder: float output
        assert isinstance(codec, av.AudioCodecContext)
        codec.sample_rate, codec.layout = OPUS_RATE, "mono"
        self._codec = codec

    def decode(self, packet: bytes) -> Audio:
        frames = self._codec.decode(av.Packet(packet))
        if not frames:
            return _EMPTY
        return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32)


# --- the realtime turn's converter ------------------------------------------------------


class Resampler:
    """A streaming resampler for one turn (identity at equal rates); flush at the turn's end."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self._stream = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality="HQ")
        )

    def push(self, audio: Audio, last: bool = False) -> Audio:
        if self._stream is None:
            return audio
        out: Audio = self._stream.resample_chunk(audio, last=last)
        return out


class FrameEncoder:
    """One turn's audio out: engine-rate float32 in, frames in the session's format out.

    PCM frames carry at most ``frame_ms`` each and go out as soon as the resampler releases
    their samples; Opus frames carry one 20 ms packet each. A turn cut short simply drops its
    encoder; one that ends calls :meth:`finish` for what the resampler and codec still hold.
    """

    def __init__(self, in_rate: int, out: OutputFormat, frame_ms: int) -> None:
        self.format = out
        self._ratio = Fraction(out.sample_rate, in_rate)
        self._resampler = Resampler(in_rate, out.sample_rate)
        self._opus = _OpusPackets() if out.format == "opus" else None
        self._delay = self._opus.delay if self._opus is not None else 0
        self._frame = max(1, out.sample_rate * frame_ms // 1000)

    @property
    def sample_rate(self) -> int:
        return self.format.sample_rate

    def position(self, engine_sample: int) -> int:
        """Where an engine-rate position of the turn falls in the frames' samples."""
        return round(engine_sample * self._ratio) + self._delay

    def push(self, audio: Audio) -> list[Chunk]:
        return self._encode(self._resampler.push(audio))

    def finish(self) -> list[Chunk]:
        out = self._encode(self._resampler.push(_EMPTY, last=True))
        return out + (self._opus.finish() if self._opus is not None else [])

    def _encode(self, audio: Audio) -> list[Chunk]:
        if self._opus is not None:
            return self._opus.push(audio)
        encode = _PCM_ENCODERS[self.format.format]
        return [
            (encode(audio[start : start + self._frame]), min(self._frame, audio.size - start))
            for start in range(0, audio.size, self._frame)
        ]


# --- HTTP response bodies ---------------------------------------------------------------

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
RESPONSE_FORMATS: tuple[ResponseFormat, ...] = get_args(ResponseFormat)
PCM_RESPONSE_RATE = 24_000
"""OpenAI's ``pcm`` is 24 kHz: clients play it at that rate without being told."""


@dataclass(frozen=True, slots=True)
class _Container:
    content_type: str
    muxer: str
    codec: str
    options: dict[str, str]


_CONTAINERS: dict[str, _Container] = {
    # flush_packets: each packet reaches our sink as it is muxed, not in 32 KiB blocks.
    "mp3": _Container("audio/mpeg", "mp3", "libmp3lame", {"id3v2_version": "0"}),
    # Ogg holds packets back for a page's worth (1 s by default): 20 ms pages instead.
    "opus": _Container("audio/ogg; codecs=opus", "ogg", "libopus", {"page_duration": "20000"}),
    "aac": _Container("audio/aac", "adts", "aac", {}),
    "flac": _Container("audio/flac", "flac", "flac", {}),
}


def response_output(
    response_format: ResponseFormat, native_rate: int, sample_rate: int | None
) -> OutputFormat:
    """What the session feeding a response produces: PCM16 for ``wav`` and ``pcm`` (passed
    through), float32 for the codecs. ``opus`` is 48 kHz (the request refuses another rate),
    ``pcm`` 24 kHz unless asked otherwise, the rest the voice's own rate unless asked."""
    if response_format == "opus":
        return OutputFormat(OPUS_RATE, "pcm_f32le")
    default = PCM_RESPONSE_RATE if response_format == "pcm" else native_rate
    encoding: Encoding = "pcm_s16le" if response_format in ("wav", "pcm") else "pcm_f32le"
    return OutputFormat(sample_rate or default, encoding)


def content_type(response_format: ResponseFormat, sample_rate: int) -> str:
    if response_format == "wav":
        return "audio/wav"
    if response_format == "pcm":
        return f"audio/pcm;rate={sample_rate};channels=1;encoding=s16le"
    return _CONTAINERS[response_format].content_type


_UNKNOWN_LENGTH = 0xFFFFFFFF


def wav_header(sample_rate: int) -> bytes:
    """A PCM16 mono WAV header whose sizes say 'unknown' (streaming readers accept it)."""
    return b"".join(
        [
            b"RIFF", struct.pack("<I", _UNKNOWN_LENGTH), b"WAVE",
            b"fmt ", struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16),
            b"data", struct.pack("<I", _UNKNOWN_LENGTH - 36),
        ]
    )  # fmt: skip


class _Sink:
    """Where the muxer writes; not seekable, so it writes for streaming."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


class ContainerEncoder:
    """One response body: the session's frames (``response_output``'s format) in, the
    container's bytes out as soon as the muxer writes them."""

    def __init__(
        self, response_format: ResponseFormat, sample_rate: int, bit_rate: int | None = None
    ) -> None:
        """``bit_rate``: the codec's, where the caller names one (else the codec's default)."""
        self.response_format = response_format
        self.sample_rate = sample_rate
        self._header = wav_header(sample_rate) if response_format == "wav" else b""
        container = _CONTAINERS.get(response_format)
        self._sink = _Sink()
        self._out: av.container.OutputContainer | None = None
        self._stream: av.AudioStream | None = None
        self._pts = 0
        if container is not None:
            out = av.open(
                self._sink,
                "w",
                format=container.muxer,
                options={"flush_packets": "1", **container.options},
            )
            stream = out.add_stream(container.codec, rate=sample_rate, layout="mono")
            assert isinstance(stream, av.AudioStream)
            if bit_rate is not None or container.codec == "libopus":
                stream.codec_context.bit_rate = bit_rate or OPUS_BITRATE
            self._out, self._stream = out, stream

    def push(self, frame: bytes) -> bytes:
        """One frame's bytes in; whatever the container has ready out (maybe nothing)."""
        header, self._header = self._header, b""
        if self._stream is None:
            return header + frame
        return self._encode(decode_pcm(frame, "pcm_f32le"))

    def finish(self) -> bytes:
        """The end of the body: what the codec still holds, and the container's trailer."""
        if self._out is None or self._stream is None:
            return self._header
        for packet in self._stream.encode(None):
            self._out.mux(packet)
        self._out.close()
        return self._sink.take()

    def _encode(self, audio: Audio) -> bytes:
        assert self._out is not None and self._stream is not None
        if audio.size:
            frame = av.AudioFrame.from_ndarray(audio.reshape(1, -1), format="flt", layout="mono")
            frame.sample_rate, frame.pts = self.sample_rate, self._pts
            self._pts += audio.size
            for packet in self._stream.encode(frame):
                self._out.mux(packet)
        return self._sink.take()
