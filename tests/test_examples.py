"""The framework examples in ``examples/`` speak through the real server."""

from __future__ import annotations

import asyncio
import importlib.util
import wave
from pathlib import Path
from types import ModuleType

import pytest

from conftest import timeout
from voicews.server import VoicewsServer

EXAMPLES = Path(__file__).parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "rate"),
    [("pipecat_pipeline", 24000), ("livekit_stream", 22050)],  # each framework's default
)
async def test_example_speaks(name: str, rate: int, server: VoicewsServer, tmp_path: Path) -> None:
    output = tmp_path / "reply.wav"
    await asyncio.wait_for(
        load(name).speak(server.url, "Hello! How can I help you today?", str(output)),
        timeout(30),
    )
    with wave.open(str(output)) as wav:
        assert wav.getframerate() == rate and wav.getnframes() / rate > 1.0
