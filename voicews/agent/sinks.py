"""Client side: where a turn's audio goes, and how much of it the listener has heard.

A barge-in asks the sink what was heard (the reply enters the history only that far) and cuts
it there. Without a player whose position can be read (a file, ``aplay``), a real-time
:class:`~voicews.core.listener.ListenerClock` stands in for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ..core.listener import ListenerClock


class AudioSink(Protocol):
    """Where one turn's audio goes; it knows how much of it the listener has heard."""

    def write(self, pcm: bytes) -> None: ...
    def samples_played(self) -> int: ...
    def remaining(self) -> float: ...
    def close(self, keep_samples: int | None = None) -> None: ...


class ClockSink:
    """No output, only the real-time listener: for tests, or where nothing is played."""

    def __init__(self, sample_rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.listener = ListenerClock(sample_rate)
        self._clock = clock

    def write(self, pcm: bytes) -> None:
        self.listener.add(len(pcm) // 2, self._clock())

    def samples_played(self) -> int:
        return self.listener.played(self._clock())

    def remaining(self) -> float:
        """Seconds of audio written but not yet played."""
        return self.listener.left(self._clock())

    def close(self, keep_samples: int | None = None) -> None:
        pass


class WavSink(ClockSink):
    """A WAV file of what the listener heard: all of it, or up to a barge-in."""

    def __init__(self, path: str | Path, sample_rate: int) -> None:
        super().__init__(sample_rate)
        self.path = Path(path)
        self._pcm = bytearray()
        self._closed = False

    def write(self, pcm: bytes) -> None:
        super().write(pcm)
        self._pcm += pcm

    def close(self, keep_samples: int | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        pcm = self._pcm if keep_samples is None else self._pcm[: 2 * keep_samples]
        with wave.open(str(self.path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(self.listener.sample_rate)
            out.writeframes(bytes(pcm))


class AplaySink(WavSink):
    """Plays through ``aplay`` while saving the WAV; a barge-in kills the player at once.

    The pipe is written through asyncio, so a full pipe never blocks the event loop.
    """

    def __init__(self, path: str | Path, sample_rate: int) -> None:
        super().__init__(path, sample_rate)
        self._proc: asyncio.subprocess.Process | None = None
        self._pending = bytearray()
        self._starting: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._start()
        )

    @staticmethod
    def available() -> bool:
        return shutil.which("aplay") is not None

    async def _start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            "aplay", "-q", "-t", "raw", "-f", "S16_LE", "-c", "1",
            "-r", str(self.listener.sample_rate),
            stdin=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self._feed(bytes(self._pending))
        self._pending.clear()

    def _feed(self, pcm: bytes) -> None:
        if self._proc is not None and self._proc.stdin is not None and pcm:
            with contextlib.suppress(ConnectionError):
                self._proc.stdin.write(pcm)

    def write(self, pcm: bytes) -> None:
        super().write(pcm)
        if self._proc is None:
            self._pending += pcm
        else:
            self._feed(pcm)

    def close(self, keep_samples: int | None = None) -> None:
        super().close(keep_samples)
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        if self._proc is None or self._proc.stdin is None:
            return
        if keep_samples is not None:  # barge-in: silence now
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        else:
            self._proc.stdin.close()  # let it play out what it has

    async def wait_closed(self) -> None:
        """Until ``aplay`` has exited: played out after ``close()``, or killed."""
        if self._starting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        if self._proc is not None:
            await self._proc.wait()
