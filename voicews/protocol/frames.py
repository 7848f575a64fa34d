"""The binary audio frame of protocol v1: a msgpack envelope around the encoded samples."""

from __future__ import annotations

from typing import Any

import msgpack

from ..core.events import AudioFrame


def encode_frame(frame: AudioFrame) -> bytes:
    envelope: dict[str, object] = {
        "turn_id": frame.turn_id,
        "seq": frame.seq,
        "start_sample": frame.start_sample,
        "samples": frame.samples,
        "pcm": frame.pcm,
    }
    if frame.context_id is not None:  # a client that names no context sees no new key
        envelope["context_id"] = frame.context_id
    data: bytes = msgpack.packb(envelope, use_bin_type=True)
    return data


def decode_frame(data: bytes) -> AudioFrame:
    obj: Any = msgpack.unpackb(data, raw=False)
    pcm = obj["pcm"]
    # Frames from servers before output formats carry no "samples": they are always PCM16.
    samples = obj["samples"] if "samples" in obj else len(pcm) // 2
    context = obj.get("context_id")
    return AudioFrame(obj["turn_id"], obj["seq"], obj["start_sample"], pcm, samples, context)
