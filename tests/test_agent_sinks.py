"""Where the client-side agent's audio goes, and how much of it was heard."""

from __future__ import annotations

import asyncio
import os
import wave
from pathlib import Path

import pytest

from conftest import timeout
from voicews.agent.sinks import AplaySink, ClockSink, WavSink


def test_clock_sink_hears_what_a_real_time_listener_would() -> None:
    now = [10.0]
    sink = ClockSink(1000, clock=lambda: now[0])
    sink.write(b"\x00\x00" * 500)  # half a second arrives at t=10
    now[0] = 10.25
    assert sink.samples_played() == 250 and sink.remaining() == pytest.approx(0.25)
    now[0] = 11.0  # dry since 10.5
    sink.write(b"\x00\x00" * 100)  # plays 11.0 - 11.1, not 10.5 - 10.6
    now[0] = 11.05
    assert sink.samples_played() == 550


def test_wav_sink_keeps_what_was_heard(tmp_path: Path) -> None:
    sink = WavSink(tmp_path / "turn.wav", 1000)
    sink.write(b"\x01\x00" * 800)
    sink.close(keep_samples=300)
    sink.close()  # a second close changes nothing
    with wave.open(str(tmp_path / "turn.wav")) as wav:
        assert (wav.getframerate(), wav.getnframes()) == (1000, 300)


async def test_aplay_sink_pipes_the_audio_and_stops_at_a_barge_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a stand-in ``aplay`` that records what it is fed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "aplay"
    fake.write_text('#!/bin/sh\nexec cat > "$APLAY_OUT"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert AplaySink.available()

    monkeypatch.setenv("APLAY_OUT", str(tmp_path / "played.raw"))
    sink = AplaySink(tmp_path / "one.wav", 22050)
    sink.write(b"\x01\x00" * 500)  # before aplay has started: kept until it has
    await asyncio.sleep(0.05)
    sink.write(b"\x02\x00" * 500)
    sink.close()
    await asyncio.wait_for(sink.wait_closed(), timeout(5))
    assert (tmp_path / "played.raw").read_bytes() == b"\x01\x00" * 500 + b"\x02\x00" * 500

    monkeypatch.setenv("APLAY_OUT", str(tmp_path / "cut.raw"))
    cut = AplaySink(tmp_path / "two.wav", 22050)
    cut.write(b"\x03\x00" * 500)
    await asyncio.sleep(0.05)
    cut.close(keep_samples=10)  # barge-in: killed, not drained
    await asyncio.wait_for(cut.wait_closed(), timeout(5))
    with wave.open(str(tmp_path / "two.wav")) as wav:
        assert wav.getnframes() == 10
