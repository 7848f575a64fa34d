"""Output formats: G.711 against known codes, the streaming resampler against one-shot, exact
sample counts and positions per format, and every container decoded back by PyAV."""

from __future__ import annotations

import io
import warnings

import av
import numpy as np
import pytest
import soxr

from voicews.audio import Audio, from_pcm16, to_pcm16
from voicews.encoding import (
    OPUS_FRAME,
    RESPONSE_FORMATS,
    ContainerEncoder,
    FrameEncoder,
    OpusDecoder,
    OutputFormat,
    Resampler,
    alaw_encode,
    decode_pcm,
    mulaw_encode,
    opus_packet_samples,
    response_output,
)
from voicews.protocol import SAMPLE_RATES

ENGINE_RATE = 22050
PCM_FORMATS = ["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"]
BYTES_PER_SAMPLE = {"pcm_s16le": 2, "pcm_f32le": 4, "pcm_mulaw": 1, "pcm_alaw": 1}


def speechlike(seconds: float, rate: int = ENGINE_RATE, seed: int = 0) -> Audio:
    """Harmonics under a syllable-rate envelope, plus a little noise: broadband like speech."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 20))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)
    audio = 0.2 * envelope * voiced + 0.01 * rng.standard_normal(t.size)
    return audio.astype(np.float32)


def chunked(audio: Audio, seed: int = 1) -> list[Audio]:
    """Uneven pieces, as the stitcher releases them."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, audio.size), size=audio.size // 900, replace=False))
    return np.split(audio, cuts)


# --- G.711 ------------------------------------------------------------------------------


def int16(values: list[int]) -> Audio:
    return from_pcm16(np.array(values, dtype="<i2").tobytes())


def test_g711_known_codes() -> None:
    """Reference points of ITU-T G.711: silence, both full scales, the smallest steps."""
    samples = int16([0, -1, 32767, -32768, 8, -8, 1000, -1000])
    assert mulaw_encode(samples) == bytes([0xFF, 0x7E, 0x80, 0x00, 0xFE, 0x7E, 0xCE, 0x4E])
    assert alaw_encode(samples) == bytes([0xD5, 0x55, 0xAA, 0x2A, 0xD5, 0x55, 0xFA, 0x7A])


def test_g711_decoding_is_the_inverse_of_encoding_on_every_code() -> None:
    for encode, name in ((mulaw_encode, "pcm_mulaw"), (alaw_encode, "pcm_alaw")):
        codes = bytes(range(256))
        again = encode(decode_pcm(codes, name))  # type: ignore[arg-type]
        differ = [c for c, d in zip(codes, again, strict=True) if c != d]
        assert differ == ([0x7F] if name == "pcm_mulaw" else []), differ  # mu-law's -0 is 0


def test_g711_matches_audioop_on_every_16_bit_sample() -> None:
    """audioop (the stdlib before 3.13) as the oracle, where this Python still has it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")
    every = np.arange(-32767, 32768, dtype="<i2").tobytes()  # floats clip at -32767
    audio = from_pcm16(every)
    assert to_pcm16(audio) == every  # so the float path reaches every sample exactly
    assert mulaw_encode(audio) == audioop.lin2ulaw(every, 2)
    assert alaw_encode(audio) == audioop.lin2alaw(every, 2)
    codes = bytes(range(256))
    assert to_pcm16(decode_pcm(codes, "pcm_mulaw")) == audioop.ulaw2lin(codes, 2)
    assert to_pcm16(decode_pcm(codes, "pcm_alaw")) == audioop.alaw2lin(codes, 2)


# --- resampling -------------------------------------------------------------------------


@pytest.mark.parametrize("out_rate", [8000, 16000, 24000, 44100, 48000])
def test_streaming_resampler_matches_one_shot_and_flushes_to_the_exact_length(
    out_rate: int,
) -> None:
    audio = speechlike(2.0)
    resampler = Resampler(ENGINE_RATE, out_rate)
    pieces = [resampler.push(chunk) for chunk in chunked(audio)]
    streamed = np.concatenate([*pieces, resampler.push(np.zeros(0, np.float32), last=True)])
    one_shot = soxr.resample(audio, ENGINE_RATE, out_rate, quality="HQ")
    assert streamed.size == one_shot.size == round(audio.size * out_rate / ENGINE_RATE)
    lsb = np.abs(streamed - one_shot).max() * 32767
    assert lsb <= 2, lsb


@pytest.mark.parametrize(("out_rate", "bound_ms"), [(24000, 45), (48000, 45), (8000, 90)])
def test_resampler_lag(out_rate: int, bound_ms: float) -> None:
    """What the stream holds back after each 40 ms push: soxr's HQ filter works in blocks, so
    20-40 ms at 24 and 48 kHz, up to 80 ms at 8 kHz. A segment's first frame is not delayed by
    it (an engine chunk is far longer than that); the end of a segment, mostly its pause, goes
    out with the next segment's audio, and the turn's end with the flush."""
    resampler = Resampler(ENGINE_RATE, out_rate)
    audio = speechlike(1.0)
    pushed = out = 0
    lags = []
    for chunk in np.array_split(audio, 25):
        pushed += chunk.size
        out += resampler.push(chunk).size
        lags.append(pushed * out_rate / ENGINE_RATE - out)
    lag_ms = max(lags[1:]) / out_rate * 1000
    assert 0 < lag_ms < bound_ms, lag_ms


def test_same_rate_passes_through() -> None:
    audio = speechlike(0.1)
    assert Resampler(ENGINE_RATE, ENGINE_RATE).push(audio) is audio


# --- realtime frames --------------------------------------------------------------------


def encode_turn(encoder: FrameEncoder, audio: Audio) -> list[tuple[bytes, int]]:
    chunks = []
    for piece in chunked(audio):
        chunks += encoder.push(piece)
    return chunks + encoder.finish()


def click(at: int, size: int) -> Audio:
    audio = np.zeros(size, np.float32)
    audio[at] = 0.9
    return audio


@pytest.mark.parametrize("rate", SAMPLE_RATES)
@pytest.mark.parametrize("encoding", PCM_FORMATS)
def test_pcm_frames_count_exact_samples_and_land_positions(rate: int, encoding: str) -> None:
    fmt = OutputFormat(rate, encoding)  # type: ignore[arg-type]
    encoder = FrameEncoder(ENGINE_RATE, fmt, frame_ms=40)
    audio = speechlike(1.0) + click(9000, ENGINE_RATE)
    chunks = encode_turn(encoder, audio)
    limit = rate * 40 // 1000
    assert all(0 < samples <= limit for _, samples in chunks)
    assert all(len(data) == samples * BYTES_PER_SAMPLE[encoding] for data, samples in chunks)
    assert sum(samples for _, samples in chunks) == round(audio.size * rate / ENGINE_RATE)
    decoded = decode_pcm(b"".join(data for data, _ in chunks), encoding)  # type: ignore[arg-type]
    clicked = encode_turn(FrameEncoder(ENGINE_RATE, fmt, 40), click(9000, ENGINE_RATE))
    peak = int(np.argmax(decode_pcm(b"".join(d for d, _ in clicked), encoding)))  # type: ignore[arg-type]
    assert abs(peak - encoder.position(9000)) <= 1
    assert decoded.size == sum(samples for _, samples in chunks)


def test_opus_frames_are_20_ms_packets_whose_counts_match_the_decoder() -> None:
    encoder = FrameEncoder(ENGINE_RATE, OutputFormat(48000, "opus"), frame_ms=40)
    audio = speechlike(1.0)
    chunks = encode_turn(encoder, audio)
    decoder = OpusDecoder()
    decoded = [decoder.decode(data) for data, _ in chunks]
    assert [samples for _, samples in chunks] == [d.size for d in decoded]
    assert all(samples == OPUS_FRAME for _, samples in chunks)
    total = sum(samples for _, samples in chunks)
    assert total >= encoder.position(audio.size) > audio.size * 48000 / ENGINE_RATE
    # Positions include the encoder's lookahead: the decoded click is where position() says.
    clicked = encode_turn(FrameEncoder(ENGINE_RATE, OutputFormat(48000, "opus"), 40),
                          click(9000, ENGINE_RATE))  # fmt: skip
    decoder = OpusDecoder()
    out = np.concatenate([decoder.decode(data) for data, _ in clicked])
    assert abs(int(np.argmax(np.abs(out))) - encoder.position(9000)) <= 3


def test_opus_sounds_like_its_input() -> None:
    encoder = FrameEncoder(48000, OutputFormat(48000, "opus"), frame_ms=40)
    audio = speechlike(1.0, rate=48000)
    decoder = OpusDecoder()
    out = np.concatenate([decoder.decode(data) for data, _ in encode_turn(encoder, audio)])
    aligned = out[encoder.position(0) : encoder.position(0) + audio.size]
    snr = 10 * np.log10(np.sum(audio**2) / np.sum((aligned - audio) ** 2))
    assert snr > 10, snr


def test_opus_packet_durations_from_the_toc_byte() -> None:
    assert opus_packet_samples(bytes([0b11111_000])) == 960  # CELT 20 ms, one frame
    assert opus_packet_samples(bytes([0b10000_000])) == 120  # CELT 2.5 ms
    assert opus_packet_samples(bytes([0b00011_001])) == 5760  # SILK 60 ms, two frames
    assert opus_packet_samples(bytes([0b01101_011, 3])) == 2880  # hybrid 20 ms, three frames


def test_an_empty_turn_encodes_to_nothing() -> None:
    for fmt in (OutputFormat(48000, "opus"), OutputFormat(8000, "pcm_mulaw")):
        assert FrameEncoder(ENGINE_RATE, fmt, 40).finish() == []


def test_output_format_updates() -> None:
    native = OutputFormat(22050)
    assert native.updated(8000, "pcm_mulaw") == OutputFormat(8000, "pcm_mulaw")
    assert native.updated(None, "opus") == OutputFormat(48000, "opus")
    assert OutputFormat(48000, "opus").updated(None, "pcm_s16le") == OutputFormat(48000)
    assert native.updated(16000, None) == OutputFormat(16000)
    with pytest.raises(ValueError, match="opus"):
        OutputFormat(48000, "opus").updated(8000, None)


# --- HTTP bodies ------------------------------------------------------------------------


def stream_body(fmt: str, audio: Audio, rate: int) -> tuple[bytes, int]:
    """The whole body, and how many samples had gone in when its first audio bytes came out."""
    output = response_output(fmt, rate, None)  # type: ignore[arg-type]
    assert output.sample_rate == rate or fmt in ("pcm", "opus")
    encoder = ContainerEncoder(fmt, rate)  # type: ignore[arg-type]
    body, first = b"", None
    frame = rate * 40 // 1000
    for start in range(0, audio.size, frame):
        piece = audio[start : start + frame]
        data = to_pcm16(piece) if output.format == "pcm_s16le" else piece.astype("<f4").tobytes()
        body += encoder.push(data)
        if first is None and len(body) > 200:  # past any header
            first = start + piece.size
    assert first is not None, "nothing came out before the end"
    return body + encoder.finish(), first


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav"])
def test_containers_stream_and_decode_to_the_same_duration(fmt: str) -> None:
    rate = 48000 if fmt == "opus" else ENGINE_RATE
    audio = speechlike(3.0, rate)
    body, first = stream_body(fmt, audio, rate)
    assert first <= 0.25 * rate, f"{fmt}: first bytes only after {first / rate:.2f} s of audio"
    with av.open(io.BytesIO(body)) as container:
        stream = container.streams.audio[0]
        assert (stream.rate, stream.channels) == (rate, 1)
        decoded = sum(frame.samples for frame in container.decode(stream))
    # Codecs add their priming and pad the last frame: up to ~100 ms on 3 s here.
    assert audio.size <= decoded <= audio.size + 0.1 * rate, (decoded, audio.size)


def test_pcm_body_is_raw_pcm16() -> None:
    audio = speechlike(0.5, 24000)
    body, _ = stream_body("pcm", audio, 24000)
    assert body == to_pcm16(audio)


def test_response_rates() -> None:
    assert response_output("pcm", 22050, None) == OutputFormat(24000)
    assert response_output("pcm", 22050, 16000) == OutputFormat(16000)
    assert response_output("wav", 22050, None) == OutputFormat(22050)
    assert response_output("mp3", 22050, None) == OutputFormat(22050, "pcm_f32le")
    assert response_output("opus", 22050, None) == OutputFormat(48000, "pcm_f32le")
    assert set(RESPONSE_FORMATS) == {"mp3", "opus", "aac", "flac", "wav", "pcm"}
