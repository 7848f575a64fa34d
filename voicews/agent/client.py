"""Client side of a voice agent: an LLM's reply is spoken while it is still being generated.

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
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

from websockets.exceptions import ConnectionClosed

from ..client import RealtimeClient
from ..core.conversation import AgentConfig, Conversation, Message
from ..llm.generate import ReplyStats
from ..llm.local import LocalLLM
from ..protocol import AudioFrame, Error, SegmentStarted, TurnDone, WordMark, Words
from .sinks import AudioSink, ClockSink

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
        token_delay_s: float = 0.0,
    ) -> None:
        self.client = client
        self.llm = llm
        self.conversation = Conversation(config or AgentConfig())
        self.sinks = sinks
        self.on_delta = on_delta
        self.token_delay_s = token_delay_s
        """Pause after each token: simulates a slower model (demos and barge-in tests)."""
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

    @property
    def config(self) -> AgentConfig:
        return self.conversation.config

    @config.setter
    def config(self, config: AgentConfig) -> None:
        self.conversation.config = config

    @property
    def history(self) -> list[Message]:
        return self.conversation.history

    def prompt(self) -> list[Message]:
        """What the model sees: the system prompt and the bounded history."""
        return self.conversation.prompt()

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
        self.conversation.user(user_text)
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
            token_delay_s=self.token_delay_s,
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
        self.conversation.assistant(reply)
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
