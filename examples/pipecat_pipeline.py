"""A minimal Pipecat pipeline speaking through a local voicews, token by token.

    voicews serve &
    pip install -e '.[pipecat]'
    python examples/pipecat_pipeline.py "Hello! How can I help you today?" -o reply.wav

The "LLM" here streams the text as word pieces at 30 tokens/s, the way an LLM service pushes
``LLMTextFrame``s; in a real bot ``llm`` sits where ``FakeLLM`` is and ``transport.output()``
where ``WavWriter`` is.
"""

from __future__ import annotations

import argparse
import asyncio
import wave

from pipecat.frames.frames import (
    EndFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from voicews.client import word_pieces
from voicews.integrations.pipecat import VoicewsTTSService


class WavWriter(FrameProcessor):
    """Writes the bot's reply to a WAV file once spoken; ``done`` is set then."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path
        self._pcm = bytearray()
        self._rate = 0
        self.done = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self._pcm += frame.audio
            self._rate = frame.sample_rate  # the rate voicews confirmed for the session
        elif isinstance(frame, TTSStoppedFrame):
            with wave.open(self._path, "wb") as wav:
                wav.setnchannels(1)
                wav.setsampwidth(2)
                wav.setframerate(self._rate)
                wav.writeframes(bytes(self._pcm))
            self.done.set()
        await self.push_frame(frame, direction)


async def speak(url: str, text: str, output: str) -> None:
    tts = VoicewsTTSService(url=url)
    writer = WavWriter(output)
    worker = PipelineWorker(Pipeline([tts, writer]), params=PipelineParams())
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())

    # FakeLLM: one reply, streamed token by token.
    await worker.queue_frame(LLMFullResponseStartFrame())
    for piece in word_pieces(text):
        await worker.queue_frame(LLMTextFrame(piece))
        await asyncio.sleep(1 / 30)
    await worker.queue_frame(LLMFullResponseEndFrame())

    await writer.done.wait()
    await worker.queue_frame(EndFrame())
    await running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text", nargs="?", default="Hello! How can I help you today?")
    parser.add_argument("-o", "--output", default="reply.wav")
    parser.add_argument("--url", default="ws://127.0.0.1:8765/v1/realtime")
    args = parser.parse_args()
    asyncio.run(speak(args.url, args.text, args.output))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
