"""A minimal LiveKit Agents TTS stream speaking through a local voicews, with timed words.

    voicews serve &
    pip install -e '.[livekit]'
    python examples/livekit_stream.py "Hello! How can I help you today?" -o reply.wav

In an agent, ``AgentSession(tts=TTS(url=...))`` does what this does: pushes the LLM's tokens
into ``stream()`` as they come and plays the frames, captions timed by the words.
"""

from __future__ import annotations

import argparse
import asyncio

from livekit import rtc
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

from voicews.client import word_pieces
from voicews.integrations.livekit import TTS


async def speak(url: str, text: str, output: str) -> None:
    async with TTS(url=url) as voice:
        stream = voice.stream()

        async def llm() -> None:  # the LLM's tokens, at 30/s
            for piece in word_pieces(text):
                stream.push_text(piece)
                await asyncio.sleep(1 / 30)
            stream.end_input()

        tokens = asyncio.create_task(llm())
        frames = []
        async for audio in stream:
            frames.append(audio.frame)
            for word in audio.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, []):
                print(f"{word.start_time:6.2f} s  {word}")
        await tokens
        await stream.aclose()
    with open(output, "wb") as out:
        out.write(rtc.combine_audio_frames(frames).to_wav_bytes())


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
