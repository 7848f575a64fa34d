"""Time to first audio, stalls and real-time factor for LLM-like streamed replies.

Streams a few built-in assistant replies as word-piece deltas (``voicews.client.word_pieces``)
at LLM-like token rates and measures what a real-time listener gets. By default it starts a
``VoicewsServer`` in-process on a free port (client and server then share one event loop);
``--url`` measures a running service instead.

    python -m bench ttfa                          # 20 and 50 tokens/s, 5 repeats (~2 min)
    python -m bench ttfa --rates 20 --repeats 3 --json ttfa.json
    python -m bench ttfa --stall-guard-ms 600 --idle-flush-ms 300
    python -m bench ttfa --compare-first-words 1,2,3   # eager start vs stalls, side by side
    python -m bench ttfa --lanes 1,2              # compute lanes, one after the other

Per run: TTFA (first delta sent -> first audio frame received), stall (silence heard by a
listener who starts playing at the first frame), end -> last audio (``end_text`` sent -> last
frame received), RTF (first delta -> ``turn_done``, over the audio duration) and segments.
Figures are medians (and p95 / max) over all replies and repeats at one rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from bench.common import REPLIES, json_safe, rate_list, source_version
from bench.listening.phrasing import one_word_mid
from voicews.client import RealtimeClient, SpokenTurn, word_pieces
from voicews.core.config import SessionConfig
from voicews.server import ServerConfig, VoicewsServer

STALL_MS = 100.0
"""A run counts as stalled if its stall time is over this."""


@dataclass(frozen=True, slots=True)
class Run:
    """One measured turn."""

    rate: float
    reply: int
    repeat: int
    ttfa_ms: float | None
    stall_ms: float
    end_to_last_ms: float | None
    rtf: float | None
    segments: int
    segment_texts: list[str]
    audio_s: float
    errors: list[str]
    cancelled: bool

    @classmethod
    def from_turn(cls, turn: SpokenTurn, rate: float, reply: int, repeat: int) -> Run:
        first_audio = turn.first_audio
        end_to_last = None
        if turn.frame_times and turn.end_text_at is not None:
            end_to_last = (turn.frame_times[-1] - turn.end_text_at) * 1000
        rtf = None
        if turn.duration > 0 and turn.done_at is not None and turn.first_delta_at is not None:
            rtf = (turn.done_at - turn.first_delta_at) / turn.duration
        return cls(
            rate=rate,
            reply=reply,
            repeat=repeat,
            ttfa_ms=None if first_audio is None else first_audio * 1000,
            stall_ms=turn.stall() * 1000,
            end_to_last_ms=end_to_last,
            rtf=rtf,
            segments=len(turn.segments),
            segment_texts=[segment.text for segment in turn.segments],
            audio_s=turn.duration,
            errors=[f"{e.code}: {e.message}" for e in turn.errors],
            cancelled=bool(turn.done and turn.done.cancelled),
        )


@dataclass(frozen=True, slots=True)
class Variant:
    """One server configuration under test."""

    label: str
    session: SessionConfig | None  # None: a remote server, its configuration unknown
    lanes: int = ServerConfig().lanes

    @property
    def first_words(self) -> str:
        if self.session is None:
            return "?"
        words = self.session.segmenter.first_words
        return "the engine's" if words is None else str(words)


@dataclass(frozen=True, slots=True)
class Summary:
    runs: int
    ttfa_med_ms: float
    ttfa_p95_ms: float
    stall_med_ms: float
    stall_max_ms: float
    end_to_last_med_ms: float
    rtf_med: float
    segments_med: float
    first_words_med: float
    words_per_segment_med: float
    one_word_mid: int
    """Segments of one word neither first nor last in their reply: heard as prosody breaks."""
    mid_segments: int
    stalled_runs: int
    failed_runs: int

    @classmethod
    def of(cls, runs: Sequence[Run]) -> Summary:
        def values(get: Callable[[Run], float | None]) -> list[float]:
            return [v for v in map(get, runs) if v is not None]

        def med(xs: list[float]) -> float:
            return statistics.median(xs) if xs else float("nan")

        ttfa = values(lambda r: r.ttfa_ms)
        stall = values(lambda r: r.stall_ms)
        return cls(
            runs=len(runs),
            ttfa_med_ms=med(ttfa),
            ttfa_p95_ms=float(np.percentile(ttfa, 95)) if ttfa else float("nan"),
            stall_med_ms=med(stall),
            stall_max_ms=max(stall, default=float("nan")),
            end_to_last_med_ms=med(values(lambda r: r.end_to_last_ms)),
            rtf_med=med(values(lambda r: r.rtf)),
            segments_med=med(values(lambda r: float(r.segments))),
            first_words_med=med(
                values(lambda r: len(r.segment_texts[0].split()) if r.segment_texts else None)
            ),
            words_per_segment_med=med(
                [float(len(t.split())) for r in runs for t in r.segment_texts]
            ),
            one_word_mid=sum(one_word_mid(r.segment_texts)[0] for r in runs),
            mid_segments=sum(one_word_mid(r.segment_texts)[1] for r in runs),
            stalled_runs=sum(r.stall_ms > STALL_MS for r in runs),
            failed_runs=sum(bool(r.errors) or r.cancelled or r.ttfa_ms is None for r in runs),
        )


# --- running ----------------------------------------------------------------------------------


async def measure_rate(
    url: str, rate: float, replies: Sequence[str], repeats: int, per_run_connection: bool
) -> list[Run]:
    """Every reply ``repeats`` times at ``rate``, interleaved so drift hits all replies alike."""
    runs: list[Run] = []
    client = None if per_run_connection else await RealtimeClient.connect(url)
    try:
        for repeat in range(repeats):
            for index, text in enumerate(replies):
                if per_run_connection:
                    async with await RealtimeClient.connect(url) as fresh:
                        turn = await fresh.speak(text, tokens_per_s=rate)
                else:
                    assert client is not None
                    turn = await client.speak(text, tokens_per_s=rate)
                runs.append(Run.from_turn(turn, rate, index, repeat))
    finally:
        if client is not None:
            await client.ws.close()
    return runs


async def warm_up(url: str) -> None:
    """One unmeasured turn: the engine's first inference is slower than the rest."""
    async with await RealtimeClient.connect(url) as client:
        await client.speak("Warming up, one moment.", tokens_per_s=100)


async def measure_variant(
    variant: Variant, url: str | None, args: argparse.Namespace
) -> dict[float, list[Run]]:
    server = None
    if url is None:
        assert variant.session is not None
        config = ServerConfig(
            port=0, engine=args.engine, session=variant.session, lanes=variant.lanes
        )
        server = VoicewsServer(config)
        await server.start()
        url = server.url
    try:
        await warm_up(url)
        results: dict[float, list[Run]] = {}
        for rate in args.rates:
            started = time.perf_counter()
            results[rate] = await measure_rate(
                url, rate, REPLIES, args.repeats, args.connection_per_run
            )
            print(
                f"  [{variant.label}] {rate:g} tok/s: {len(results[rate])} runs in "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
        return results
    finally:
        if server is not None:
            await server.close()


# --- configuration ----------------------------------------------------------------------------


def session_config(
    base: SessionConfig,
    idle_flush_ms: int | None,
    stall_guard_ms: int | None,
    first_words: int | None,
) -> SessionConfig:
    config = base
    if idle_flush_ms is not None:
        config = replace(config, idle_flush_ms=idle_flush_ms)
    if stall_guard_ms is not None:
        config = replace(config, stall_guard_ms=stall_guard_ms)
    if first_words is not None:
        config = replace(config, segmenter=replace(config.segmenter, first_words=first_words))
    return config


def describe(config: SessionConfig) -> str:
    return (
        f"first_words={config.segmenter.first_words or 'the engine'} "
        f"idle_flush_ms={config.idle_flush_ms} "
        f"stall_guard_ms={config.stall_guard_ms}"
    )


def variants(args: argparse.Namespace) -> list[Variant]:
    if args.url is not None:
        return [Variant(f"remote {args.url}", None)]
    base = session_config(SessionConfig(), args.idle_flush_ms, args.stall_guard_ms, None)
    first_words = args.compare_first_words or [args.first_words]
    out = []
    for lanes in args.lanes:
        for words in first_words:
            config = session_config(base, None, None, words)
            out.append(Variant(f"{describe(config)} lanes={lanes}", config, lanes))
    return out


def int_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2,3: {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--url", help="measure a running service instead of an in-process one")
    parser.add_argument("--rates", type=rate_list, default=[20.0, 50.0], help="tokens/s")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each reply per rate")
    parser.add_argument(
        "--connection-per-run",
        action="store_true",
        help="open a new connection per run (default: one per rate, new turn ids)",
    )
    parser.add_argument("--engine", default=ServerConfig().engine, help="in-process server's")
    parser.add_argument("--idle-flush-ms", type=int, help="SessionConfig.idle_flush_ms")
    parser.add_argument("--stall-guard-ms", type=int, help="SessionConfig.stall_guard_ms")
    parser.add_argument("--first-words", type=int, help="SegmenterConfig.first_words")
    parser.add_argument(
        "--compare-first-words",
        type=int_list,
        metavar="N,N,...",
        help="run everything once per first_words value and compare",
    )
    parser.add_argument(
        "--lanes",
        type=int_list,
        default=[ServerConfig().lanes],
        metavar="N,N,...",
        help="compute lanes of the in-process server; several run one after the other",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw numbers here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    overrides = (args.idle_flush_ms, args.stall_guard_ms, args.first_words)
    if args.url and args.engine != ServerConfig().engine:
        parser.error("--engine needs the in-process server; drop --url")
    if args.url and (any(v is not None for v in overrides) or args.compare_first_words):
        parser.error("config overrides need the in-process server; drop --url")
    if args.first_words is not None and args.compare_first_words:
        parser.error("--first-words and --compare-first-words exclude each other")
    return args


# --- reporting --------------------------------------------------------------------------------

COLUMNS: tuple[tuple[str, str, Callable[[Summary], float]], ...] = (
    ("runs", "{:>5.0f}", lambda s: s.runs),
    ("TTFA med", "{:>9.0f}", lambda s: s.ttfa_med_ms),
    ("TTFA p95", "{:>9.0f}", lambda s: s.ttfa_p95_ms),
    ("stall med", "{:>10.0f}", lambda s: s.stall_med_ms),
    ("stall max", "{:>10.0f}", lambda s: s.stall_max_ms),
    ("end->last med", "{:>14.0f}", lambda s: s.end_to_last_med_ms),
    ("RTF med", "{:>8.3f}", lambda s: s.rtf_med),
    ("segs med", "{:>9.1f}", lambda s: s.segments_med),
    ("words/seg", "{:>10.1f}", lambda s: s.words_per_segment_med),
    ("1-word mid", "{:>11.0f}", lambda s: s.one_word_mid),
    ("mid segs", "{:>9.0f}", lambda s: s.mid_segments),
    (f"stall>{STALL_MS:.0f}ms", "{:>11.0f}", lambda s: s.stalled_runs),
)


def table(rows: Sequence[tuple[str, Summary]], key: str) -> str:
    width = max(len(key), *(len(label) for label, _ in rows))
    head = [f"{key:<{width}}"]
    head += [f"{name:>{len(fmt.format(0))}}" for name, fmt, _ in COLUMNS]
    lines = ["  ".join(head)]
    for label, summary in rows:
        cells = [f"{label:<{width}}"] + [fmt.format(get(summary)) for _, fmt, get in COLUMNS]
        lines.append("  ".join(cells))
    return "\n".join(lines)


Results = list[tuple[Variant, dict[float, list[Run]]]]


def report(results: Results, compare: bool, version: str) -> None:
    print(f"voicews {version}" if results[0][0].session else "remote voicews")
    print(f"times in ms; {len(REPLIES)} replies; stall>{STALL_MS:.0f}ms counts stalled runs")
    for variant, by_rate in results:
        print(f"\n{variant.label}")
        rows = [(f"{rate:g} tok/s", Summary.of(runs)) for rate, runs in by_rate.items()]
        print(table(rows, "rate"))
        for runs in by_rate.values():
            for run in runs:
                if run.errors or run.cancelled or run.ttfa_ms is None:
                    print(f"  ! reply {run.reply} repeat {run.repeat}: {run.errors or 'no audio'}")
    if compare:
        print("\ncomparison (first_words: eager first audio vs stalls after it)")
        rows = [
            (f"{rate:g} tok/s fw={variant.first_words}", Summary.of(by_rate[rate]))
            for rate in results[0][1]
            for variant, by_rate in results
        ]
        print(table(rows, "rate, first_words"))
        print("\nmedian words in the first segment:")
        for rate in results[0][1]:
            cells = [
                f"fw={variant.first_words}: {Summary.of(by_rate[rate]).first_words_med:g}"
                for variant, by_rate in results
            ]
            print(f"  {rate:g} tok/s  " + "  ".join(cells))


def write_json(path: Path, args: argparse.Namespace, results: Results, version: str) -> None:
    payload = {
        "voicews": version if args.url is None else None,
        "replies": list(REPLIES),
        "word_pieces": [len(word_pieces(text)) for text in REPLIES],
        "rates": args.rates,
        "repeats": args.repeats,
        "url": args.url,
        "variants": [
            {
                "label": variant.label,
                "lanes": variant.lanes,
                "session": None if variant.session is None else _session_fields(variant.session),
                "by_rate": [
                    {
                        "rate": rate,
                        "summary": asdict(Summary.of(runs)),
                        "runs": [asdict(run) for run in runs],
                    }
                    for rate, runs in by_rate.items()
                ],
            }
            for variant, by_rate in results
        ],
    }
    path.write_text(json.dumps(json_safe(payload), indent=2) + "\n")


def _session_fields(config: SessionConfig) -> dict[str, int | None]:
    return {
        "first_words": config.segmenter.first_words,
        "max_chars": config.segmenter.max_chars,
        "idle_flush_ms": config.idle_flush_ms,
        "stall_guard_ms": config.stall_guard_ms,
        "frame_ms": config.frame_ms,
        "max_pending_audio_ms": config.max_pending_audio_ms,
    }


async def main_async(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    version = source_version()  # before the run: the code imported is the code now
    results: Results = []
    for variant in variants(args):
        results.append((variant, await measure_variant(variant, args.url, args)))
    report(results, compare=bool(args.compare_first_words), version=version)
    print(f"\ntotal {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.json is not None:
        write_json(args.json, args, results, version)
        print(f"raw numbers written to {args.json}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    main()
