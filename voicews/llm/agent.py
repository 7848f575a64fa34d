"""A multi-turn voice agent: an LLM's reply is spoken while it is still being generated.

Each user message starts a turn: the model generates on its own thread, every text delta goes
to voicews as ``text_delta`` the moment it exists, ``end_text`` follows when generation ends,
and the audio plays (or is saved) as it arrives. A new user message while a reply is still
generating or playing is a barge-in: generation stops within a token, the new turn's
``turn_reset`` cuts the old audio on the server, and the history keeps only the part of the
reply the user heard, as the server's ``segment`` events place it against local playback.

``clients/agent.py`` is the command line around :class:`Agent`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import shutil
import threading
import time
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from websockets.exceptions import ConnectionClosed

from ..client import RealtimeClient
from ..protocol import AudioFrame, Error, SegmentStarted, TurnDone, WordMark, Words
from .generate import (
    Message,
    PromptCache,
    ReplyStats,
    chat_tokens,
    stream_reply,
    truncate_history,
)

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module

log = logging.getLogger(__name__)


class _Segment(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def start_sample(self) -> int: ...


def heard_text(spoken: Sequence[_Segment], samples_played: int) -> str:
    """The reply as far as the listener heard it: every word (where the server placed words)
    or segment that had started playing.

    A unit counts once its first sample has played (``start_sample < samples_played``); a
    sentence cut off halfway was still partly heard, and the model should know it said it.
    """
    return " ".join(
        s.text.strip() for s in spoken if s.start_sample < samples_played and s.text.strip()
    )


class PlaybackClock:
    """A listener that starts at the first frame, plays in real time and waits when dry.

    Stands in for a player's position where none can be read (a file, or ``aplay``): audio
    that arrives late does not play early, so a stall pushes the rest back.
    """

    def __init__(self, sample_rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.sample_rate = sample_rate
        self.received = 0
        self._clock = clock
        self._end: float | None = None

    def add(self, samples: int, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        if self._end is None or now > self._end:
            self._end = now
        self._end += samples / self.sample_rate
        self.received += samples

    def remaining(self, now: float | None = None) -> float:
        """Seconds of received audio not yet played."""
        if self._end is None:
            return 0.0
        return max(0.0, self._end - (self._clock() if now is None else now))

    def played(self, now: float | None = None) -> int:
        return max(0, self.received - round(self.remaining(now) * self.sample_rate))


class AudioSink(Protocol):
    """Where one turn's audio goes; it knows how much of it the listener has heard."""

    def write(self, pcm: bytes) -> None: ...
    def samples_played(self) -> int: ...
    def remaining(self) -> float: ...
    def close(self, keep_samples: int | None = None) -> None: ...


class ClockSink:
    """No output, only the real-time listener: for tests and for ``--no-audio``."""

    def __init__(self, sample_rate: int) -> None:
        self.clock = PlaybackClock(sample_rate)

    def write(self, pcm: bytes) -> None:
        self.clock.add(len(pcm) // 2)

    def samples_played(self) -> int:
        return self.clock.played()

    def remaining(self) -> float:
        return self.clock.remaining()

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
            out.setframerate(self.clock.sample_rate)
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
            "-r", str(self.clock.sample_rate),
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


class LocalLLM:
    """An mlx-lm model on a thread of its own; MLX streams are bound to the thread using them.

    Loading and every generation run on that one thread, in order, so a stopped generation
    has finished (and its prompt cache is consistent) before the next begins.
    """

    def __init__(self, path_or_repo: str | Path | None = None) -> None:
        self.path_or_repo = path_or_repo
        self.model: Module | None = None
        self.tokenizer: Any = None
        self.cache = PromptCache()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llm")

    @classmethod
    async def open(cls, path_or_repo: str | Path | None = None) -> LocalLLM:
        """Load on the model's thread; None is the bundled SmolLM2, converted on first use."""
        llm = cls(path_or_repo)
        await asyncio.wrap_future(llm._executor.submit(llm._load))
        return llm

    def _load(self) -> None:
        from .convert import default_model_dir, load

        self.model, self.tokenizer = load(self.path_or_repo or default_model_dir())

    async def warm(self, messages: list[Message]) -> None:
        """Prefill the prompt cache with what every next prompt starts with (the system
        prompt, the history), so the first reply does not wait for it; on a CPU that is
        seconds."""

        model = self._loaded()

        def run() -> None:
            prefix = chat_tokens(
                self.tokenizer, [*messages, {"role": "user", "content": ""}], False
            )
            self.cache.prefill(model, prefix)

        await asyncio.wrap_future(self._executor.submit(run))

    def generate(
        self,
        messages: list[Message],
        on_delta: Callable[[str], None],
        stop: threading.Event,
        *,
        max_tokens: int,
        temperature: float,
        top_p: float,
        token_delay_s: float = 0.0,
    ) -> tuple[concurrent.futures.Future[None], ReplyStats]:
        """Start generating on the model's thread; ``on_delta`` is called there, per delta."""
        stats = ReplyStats()
        model = self._loaded()

        def run() -> None:
            if stop.is_set():
                stats.stopped = True
                return
            for delta in stream_reply(
                model,
                self.tokenizer,
                messages,
                max_tokens,
                stop.is_set,
                temperature=temperature,
                top_p=top_p,
                cache=self.cache,
                stats=stats,
            ):
                on_delta(delta)
                if token_delay_s:
                    stop.wait(token_delay_s)

        return self._executor.submit(run), stats

    def _loaded(self) -> Module:
        if self.model is None:
            raise RuntimeError("the model is not loaded: use LocalLLM.open")
        return self.model

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass
class AgentConfig:
    system: str | None = None
    """System prompt; None leaves it to the chat template (SmolLM2's has its own, and
    answers better with it than with a voice-specific one)."""
    max_tokens: int = 200
    temperature: float = 0.0
    top_p: float = 1.0
    max_history_messages: int = 20
    max_history_chars: int = 6000
    token_delay_s: float = 0.0
    """Pause after each token: simulates a slower model (demos and barge-in tests)."""


@dataclass
class AgentTurn:
    """One user message and the reply to it, from generation to what was heard."""

    index: int
    turn_id: str
    user: str
    sink: AudioSink
    deltas: list[str] = field(default_factory=list)
    segments: list[SegmentStarted] = field(default_factory=list)
    spoken: list[SegmentStarted | WordMark] = field(default_factory=list)
    """What ``heard_text`` reads: the segments, each replaced by its words once placed."""
    errors: list[Error] = field(default_factory=list)
    stats: ReplyStats = field(default_factory=ReplyStats)
    stop: threading.Event = field(default_factory=threading.Event)
    generation: asyncio.Future[None] | None = None
    """Done when the model's thread has stopped generating this reply."""
    done: TurnDone | None = None
    sent_chars: int = 0
    spoken_chars: int = 0
    """Characters of the reply the server has announced as segments; the gap to
    ``sent_chars`` bounds the text waiting on the server (see ``Agent._pace``)."""
    paced: int = 0
    """Times a delta waited for speech to catch up."""
    interrupted: bool = False
    failure: BaseException | None = None
    """Why the reply ended early other than a barge-in (generation error, lost connection)."""
    tokens_at_cut: int | None = None
    """Tokens generated when the barge-in stopped generation; ``stats.tokens`` ends at most
    one (the token in flight) above it."""
    heard_samples: int | None = None
    """Samples played when the turn was cut; None for a turn heard to the end."""
    heard: str | None = None
    """The reply as stored in the history: all of it, or the heard part after a barge-in."""
    started_at: float = field(default_factory=time.perf_counter)
    first_delta_at: float | None = None
    end_text_at: float | None = None
    first_audio_at: float | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    server_done: asyncio.Event = field(default_factory=asyncio.Event)
    progress: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def reply(self) -> str:
        """Everything generated (and sent to voicews) for this turn."""
        return "".join(self.deltas)


SinkFactory = Callable[[int, int], AudioSink]
"""Makes the sink of a turn, given the turn's number (1, 2, ...) and the sample rate."""


def clock_sinks(index: int, sample_rate: int) -> AudioSink:
    return ClockSink(sample_rate)


class Agent:
    """Runs turns against one voicews session; see the module docstring.

    >>> async with Agent(client, llm) as agent:
    ...     turn = await agent.respond("What is the capital of France?")
    ...     await agent.wait(turn)
    """

    def __init__(
        self,
        client: RealtimeClient,
        llm: LocalLLM,
        config: AgentConfig | None = None,
        sinks: SinkFactory = clock_sinks,
        on_delta: Callable[[AgentTurn, str], None] | None = None,
    ) -> None:
        self.client = client
        self.llm = llm
        self.config = config or AgentConfig()
        self.sinks = sinks
        self.on_delta = on_delta
        self.history: list[Message] = []
        self.turns: list[AgentTurn] = []
        self.current: AgentTurn | None = None
        self._by_id: dict[str, AgentTurn] = {}
        self._lifecycles: dict[str, asyncio.Task[None]] = {}
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Agent:
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop everything: a reply still going is cut (and kept as far as it was heard)."""
        await self.interrupt()
        for task in [*self._lifecycles.values(), self._reader]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def prompt(self) -> list[Message]:
        """What the model sees: the system prompt and the bounded history."""
        system = [{"role": "system", "content": self.config.system}] if self.config.system else []
        return truncate_history(
            system + self.history,
            self.config.max_history_messages,
            self.config.max_history_chars,
        )

    async def warm(self) -> None:
        """Prefill the model's cache with the prompt so far, while the user is still typing."""
        await self.llm.warm(self.prompt())

    async def respond(self, user_text: str) -> AgentTurn:
        """Start the reply to ``user_text``, barging in on the current one if it still runs."""
        await self.interrupt()
        index = next(self._ids)
        turn = AgentTurn(index, f"a{index}", user_text, self.sinks(index, self.client.sample_rate))
        self.turns.append(turn)
        self._by_id[turn.turn_id] = turn
        self.current = turn
        self.history.append({"role": "user", "content": user_text})
        await self.client.turn_reset(turn.turn_id)
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue[str | None] = asyncio.Queue()

        def post(item: str | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
                loop.call_soon_threadsafe(deltas.put_nowait, item)

        future, turn.stats = self.llm.generate(
            self.prompt(),
            post,
            turn.stop,
            max_tokens=self.config.max_tokens,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            token_delay_s=self.config.token_delay_s,
        )
        future.add_done_callback(lambda _: post(None))
        turn.generation = asyncio.wrap_future(future)
        self._lifecycles[turn.turn_id] = asyncio.create_task(self._run(turn, deltas))
        return turn

    async def interrupt(self) -> AgentTurn | None:
        """Barge-in: cut the current turn if it is still generating or playing."""
        turn = self.current
        if turn is None or turn.finished.is_set():
            return None
        turn.stop.set()
        turn.tokens_at_cut = turn.stats.tokens
        turn.interrupted = True
        turn.heard_samples = turn.sink.samples_played()
        task = self._lifecycles.pop(turn.turn_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        turn.sink.close(turn.heard_samples)
        self._commit(turn, heard_text(turn.spoken, turn.heard_samples))
        return turn

    async def wait(self, turn: AgentTurn | None = None, timeout: float | None = None) -> None:
        """Until ``turn`` (default: the current one) is over: heard to the end, or cut."""
        turn = turn or self.current
        if turn is not None:
            await asyncio.wait_for(turn.finished.wait(), timeout)

    async def _run(self, turn: AgentTurn, deltas: asyncio.Queue[str | None]) -> None:
        """Forward the deltas, end the text, then wait for the server and for playback."""
        assert turn.generation is not None
        try:
            while (delta := await deltas.get()) is not None:
                if turn.first_delta_at is None:
                    turn.first_delta_at = time.perf_counter()
                await self._pace(turn, len(delta))
                turn.deltas.append(delta)
                turn.sent_chars += len(delta)
                await self.client.text_delta(delta)
                if self.on_delta is not None:
                    self.on_delta(turn, delta)
            try:
                await asyncio.shield(turn.generation)
            except Exception as exc:  # speak what there is; the caller sees turn.failure
                log.exception("generation failed")
                turn.failure = exc
            await self.client.end_text()
            turn.end_text_at = time.perf_counter()
            await turn.server_done.wait()
            while (left := turn.sink.remaining()) > 0:
                await asyncio.sleep(left)
        except ConnectionClosed as exc:
            turn.failure = exc
        self._lifecycles.pop(turn.turn_id, None)
        turn.sink.close()
        # text the server refused was never spoken: keep what it did speak
        self._commit(turn, heard_text(turn.spoken, 2**62) if turn.errors else turn.reply)

    async def _pace(self, turn: AgentTurn, chars: int) -> None:
        """Hold a delta while the text not yet spoken is near the server's limit.

        A fast model (hundreds of tokens/s on a Mac) outruns speech; the server refuses text
        beyond ``max_pending_text_chars`` (``text_backlog_full``), so the reply waits here,
        in the model's output, rather than being lost. Segments announce what was taken.
        """
        budget = self.client.created.limits.max_pending_text_chars * 3 // 4
        while (
            turn.sent_chars > turn.spoken_chars
            and turn.sent_chars - turn.spoken_chars + chars > budget
            and not turn.server_done.is_set()
        ):
            turn.paced += 1
            turn.progress.clear()
            await turn.progress.wait()

    def _commit(self, turn: AgentTurn, reply: str) -> None:
        """The reply enters the history as heard; an unheard reply leaves no message."""
        turn.heard = reply
        if reply.strip():
            self.history.append({"role": "assistant", "content": reply})
        self.history = truncate_history(
            self.history, self.config.max_history_messages, self.config.max_history_chars
        )
        turn.finished.set()

    async def _read(self) -> None:
        """Route the server's events and frames to their turns, by turn id."""
        try:
            while True:
                item = await self.client.recv()
                match item:
                    case AudioFrame():
                        turn = self._by_id.get(item.turn_id)
                        if turn is not None and not turn.interrupted:
                            if turn.first_audio_at is None:
                                turn.first_audio_at = time.perf_counter()
                            turn.sink.write(item.pcm)
                    case SegmentStarted():
                        turn = self._by_id.get(item.turn_id)
                        if turn is not None and not turn.interrupted:
                            turn.segments.append(item)
                            turn.spoken.append(item)
                            turn.spoken_chars += len(item.text) + 1  # and a separator
                            turn.progress.set()
                    case Words():
                        turn = self._by_id.get(item.turn_id)
                        if turn is not None and not turn.interrupted:
                            turn.spoken[-1:] = item.words  # the words of the last segment
                    case TurnDone():
                        turn = self._by_id.pop(item.turn_id, None)
                        if turn is not None:
                            turn.done = item
                            turn.server_done.set()
                            turn.progress.set()
                    case Error():
                        log.warning("voicews error %s: %s", item.code, item.message)
                        turn = self._by_id.get(item.turn_id or "") or self.current
                        if turn is not None:
                            turn.errors.append(item)
        except ConnectionClosed:
            log.warning("voicews connection closed")
            for turn in self._by_id.values():
                turn.server_done.set()
                turn.progress.set()
