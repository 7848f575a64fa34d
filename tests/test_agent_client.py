"""The client-side voice agent: what counts as heard, and whole conversations with the tiny
model against a real voicews server, including barge-in while generating and while speaking."""

from __future__ import annotations

import asyncio
import time
import wave
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import running, timeout, with_session
from voicews.agent.client import Agent, AgentTurn, heard_text
from voicews.agent.sinks import AudioSink, WavSink
from voicews.client import RealtimeClient
from voicews.core.conversation import AgentConfig
from voicews.llm.local import LocalLLM
from voicews.protocol import SegmentStarted
from voicews.server import VoicewsServer

# --- heard_text (pure) -------------------------------------------------


def segments(*starts_and_texts: tuple[int, str]) -> list[SegmentStarted]:
    return [SegmentStarted(turn_id="t", text=t, start_sample=s) for s, t in starts_and_texts]


SPOKEN = segments((0, "Hello there,"), (9000, "how are you?"), (30000, "I am fine."))


@pytest.mark.parametrize(
    ("played", "heard"),
    [
        (0, ""),
        (1, "Hello there,"),
        (9000, "Hello there,"),  # the second segment starts exactly here: not yet heard
        (9001, "Hello there, how are you?"),
        (29999, "Hello there, how are you?"),
        (10**9, "Hello there, how are you? I am fine."),
    ],
)
def test_heard_text_counts_segments_that_started_playing(played: int, heard: str) -> None:
    assert heard_text(SPOKEN, played) == heard


def test_heard_text_of_nothing() -> None:
    assert heard_text([], 10**6) == ""
    assert heard_text(segments((0, "  padded  "), (5, " ")), 10) == "padded"


# --- whole turns with the tiny model against a real server -------------------------------------


def words(text: str) -> list[str]:
    return text.split()


@pytest.fixture(scope="module")
async def llm(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalLLM]:
    pytest.importorskip("mlx_lm", exc_type=ImportError)
    pytest.importorskip("tokenizers", exc_type=ImportError)
    pytest.importorskip("mlx.core", exc_type=ImportError)
    from tiny_llm import build_tiny_model

    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    llm = await LocalLLM.open(model_dir)
    yield llm
    llm.close()


@pytest.fixture
async def agent_factory(server: VoicewsServer, llm: LocalLLM, tmp_path: Path) -> AsyncIterator[Any]:
    """Agents on fresh sessions that save each turn to ``tmp_path/turn-N.wav``."""
    stack: list[tuple[RealtimeClient, Agent]] = []

    def sinks(index: int, sample_rate: int) -> AudioSink:
        return WavSink(tmp_path / f"turn-{index}.wav", sample_rate)

    async def make(token_delay_s: float = 0.0, **config: Any) -> Agent:
        client = await RealtimeClient.connect(server.url)
        agent = Agent(client, llm, AgentConfig(**config), sinks, token_delay_s=token_delay_s)
        await agent.__aenter__()
        stack.append((client, agent))
        return agent

    yield make
    for client, agent in stack:
        await agent.close()
        await client.ws.close()


async def until(condition: Any, limit: float, step: float = 0.01) -> None:
    deadline = time.monotonic() + timeout(limit)
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(step)


async def test_reply_is_spoken_while_it_is_generated(agent_factory: Any, tmp_path: Path) -> None:
    agent: Agent = await agent_factory(max_tokens=30, token_delay_s=0.04)
    await agent.client.session_update(speed=2.0)  # half the real-time playback to wait for
    turn = await agent.respond("Hello there! How are you today?")
    await agent.wait(turn, timeout(30))
    assert turn.done is not None and not turn.done.cancelled and not turn.errors
    assert turn.stats.tokens == 30 and not turn.interrupted
    # every delta reached voicews, in order: the spoken segments are the generated reply
    assert words(" ".join(s.text for s in turn.segments)) == words(turn.reply)
    # audio began before generation ended
    assert turn.first_audio_at is not None and turn.end_text_at is not None
    assert turn.first_audio_at < turn.end_text_at
    assert agent.history == [
        {"role": "user", "content": "Hello there! How are you today?"},
        {"role": "assistant", "content": turn.reply},
    ]
    with wave.open(str(tmp_path / "turn-1.wav")) as wav:
        assert wav.getnframes() == turn.done.samples > 0


async def test_barge_in_while_generating(agent_factory: Any) -> None:
    """Generation stops within a token; the history keeps the heard part only."""
    agent: Agent = await agent_factory(max_tokens=400, token_delay_s=0.05)
    first = await agent.respond("Tell me a long story, please.")
    await until(lambda: first.first_audio_at is not None, 20)
    await asyncio.sleep(0.3)  # the start of it is heard
    assert first.generation is not None and not first.generation.done()
    agent.config = replace(agent.config, max_tokens=20)  # for the next one
    agent.token_delay_s = 0.0
    second = await agent.respond("Stop. What time is it?")

    assert first.interrupted and first.tokens_at_cut is not None
    await asyncio.wait_for(first.generation, timeout(5))
    assert first.stats.stopped
    assert first.stats.tokens - first.tokens_at_cut <= 2  # the token in flight, at most
    assert first.stats.tokens < 200
    deltas_at_cut = len(first.deltas)

    assert first.heard_samples is not None and first.heard_samples > 0
    assert first.heard == heard_text(first.spoken, first.heard_samples)
    heard = words(first.heard)
    assert 0 < len(heard) < len(words(first.reply))
    assert heard == words(first.reply)[: len(heard)]  # a prefix of what was generated

    await agent.wait(second, timeout(30))
    assert first.done is not None and first.done.cancelled  # the server cut it too
    assert len(first.deltas) == deltas_at_cut  # nothing was sent for it after the cut
    assert second.done is not None and not second.done.cancelled
    assert agent.history == [
        {"role": "user", "content": "Tell me a long story, please."},
        {"role": "assistant", "content": first.heard},
        {"role": "user", "content": "Stop. What time is it?"},
        {"role": "assistant", "content": second.reply},
    ]


async def test_barge_in_while_speaking(agent_factory: Any, tmp_path: Path) -> None:
    """All text generated and sent, audio still playing: the unheard rest is dropped."""
    agent: Agent = await agent_factory(max_tokens=60)
    first = await agent.respond("Tell me something.")
    await until(lambda: first.end_text_at is not None and first.first_audio_at is not None, 20)
    await asyncio.sleep(0.2)  # the first segment is heard, not the whole reply
    assert not first.finished.is_set()
    agent.config = replace(agent.config, max_tokens=10)
    second = await agent.respond("Thanks, that is enough.")
    assert first.interrupted and not first.stats.stopped  # generation had already ended
    assert first.heard is not None
    assert 0 < len(words(first.heard)) < len(words(first.reply))
    assert agent.history[1] == {"role": "assistant", "content": first.heard}
    with wave.open(str(tmp_path / "turn-1.wav")) as wav:  # the heard audio only
        assert wav.getnframes() == first.heard_samples
    await agent.wait(second, timeout(30))


async def test_barge_in_before_any_audio_keeps_no_reply(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(max_tokens=200, token_delay_s=0.05)
    first = await agent.respond("One")
    agent.config = replace(agent.config, max_tokens=10)
    agent.token_delay_s = 0.0
    second = await agent.respond("Two")
    assert first.interrupted and first.heard == ""
    await agent.wait(second, timeout(30))
    assert [m["role"] for m in agent.history] == ["user", "user", "assistant"]


async def test_a_fast_model_waits_for_speech_instead_of_losing_text(llm: LocalLLM) -> None:
    """The server refuses text beyond max_pending_text_chars; the agent holds it back."""
    async with (
        running(with_session(max_pending_text_chars=40)) as small,
        await RealtimeClient.connect(small.url) as client,
        Agent(client, llm, AgentConfig(max_tokens=40)) as agent,
    ):
        await client.session_update(speed=2.0)
        turn = await agent.respond("Hello there! How are you today?")
        await asyncio.wait_for(turn.server_done.wait(), timeout(30))
        assert len(turn.reply) > 2 * 40 and turn.paced > 0  # unpaced, the server would refuse
        assert not turn.errors
        assert words(" ".join(s.text for s in turn.segments)) == words(turn.reply)


async def test_history_stays_bounded(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(
        max_tokens=4, max_history_messages=2, system_prompt="Be brief."
    )
    await agent.client.session_update(speed=2.0)
    turns: list[AgentTurn] = []
    for i in range(3):
        turns.append(await agent.respond(f"Message {i}"))
        await agent.wait(turns[-1], timeout(30))
    assert agent.history == [
        {"role": "user", "content": "Message 2"},
        {"role": "assistant", "content": turns[-1].reply},
    ]
    prompt = agent.prompt()
    assert prompt[0] == {"role": "system", "content": "Be brief."} and prompt[1:] == agent.history
