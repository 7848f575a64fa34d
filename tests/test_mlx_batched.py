"""Sessions' windows decoded together by the compute worker, with the real voice on MLX's CPU
backend: the audio each session gets is the audio it gets alone.

The engine runs ``whole`` windows compiled and bucketed (the GPU's decoder; MLX's CPU backend
runs it too, slowly), so texts are short. Skipped where MLX is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError)
pytest.importorskip("onnx")

from test_worker import Recorder  # noqa: E402

from conftest import TEST_CONFIG, running, timeout  # noqa: E402
from voicews.client import RealtimeClient, SpokenTurn  # noqa: E402
from voicews.compute.execution import ComputeWorker  # noqa: E402
from voicews.compute.jobs import JobAudio  # noqa: E402
from voicews.engines.base import Begin, Engine, SynthesisOptions, Window, WordStarts  # noqa: E402
from voicews.engines.mlx_piper import MlxPiperEngine  # noqa: E402
from voicews.engines.mlx_piper.engine import MlxConfig  # noqa: E402
from voicews.engines.mlx_piper.weights import load_voice_weights  # noqa: E402
from voicews.engines.piper import bundled_voice  # noqa: E402
from voicews.server import ServerConfig  # noqa: E402

BATCHED = MlxConfig(decode="whole", compile="on", chunk_frames=16, max_batch=4, batch_wait_ms=20)
TEXTS = {"a": "Hello there.", "b": "Good morning.", "c": "Thank you."}


@pytest.fixture(scope="module")
def weights_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("voicews-cache")
    load_voice_weights(bundled_voice(), directory)
    return directory


def batched_engine(cache: Path, seed: int = 3) -> MlxPiperEngine:
    engine = MlxPiperEngine(cache_dir=cache, seed=seed, config=BATCHED)
    assert engine.batched and engine.windows.bucketed
    return engine


def test_sessions_decoded_together_get_the_audio_each_gets_alone(weights_cache: Path) -> None:
    """Three one-sentence segments through the worker's batched lane, then each alone through
    ``synthesize`` in the same order (the encoders draw the seeded noise in that order)."""
    engines: list[MlxPiperEngine] = []

    def build() -> Engine:
        engines.append(batched_engine(weights_cache))
        return engines[0]

    worker, rec = ComputeWorker(build), Recorder()
    worker.start()
    try:
        assert worker.warmed.wait(timeout(300))  # every bucket at batch sizes 1, 2 and 4
        now = time.monotonic()
        for offset, (name, text) in enumerate(TEXTS.items()):
            worker.submit(rec.speak(name, text, deadline=now + offset / 1000))
        for _ in TEXTS:  # MLX's CPU backend: seconds a step
            assert rec.finished.acquire(timeout=timeout(120))
    finally:
        worker.stop()
    assert worker.stats.largest_batch == 3  # three sessions' windows in one decoder step
    alone = batched_engine(weights_cache)
    for name, text in TEXTS.items():
        got = [e.audio for e in rec.of(name) if isinstance(e, JobAudio)]
        want = [
            a for a in alone.synthesize(text, SynthesisOptions()) if not isinstance(a, WordStarts)
        ]
        assert [len(a) for a in got] == [len(a) for a in want]
        np.testing.assert_allclose(np.concatenate(got), np.concatenate(want), atol=1e-5)


def lockstep(engine: MlxPiperEngine, texts: list[str], together: bool) -> list[list[object]]:
    """Each text's items from ``windows_of``, the texts stepped in turn as the batched lane
    steps them: each up to its next sentence's ``Begin``, then every sentence begun in that
    round ``together`` (``begin``, one batch) or each alone (None sent back), then on to the
    next round. The noise is drawn in the same order either way."""
    streams = [engine.windows_of(text, SynthesisOptions()) for text in texts]
    items: list[list[object]] = [[] for _ in texts]
    sent: list[object | None] = [None] * len(texts)
    live = set(range(len(texts)))
    while live:
        begun: dict[int, object] = {}
        for i in sorted(live):
            try:
                item = streams[i].send(sent[i])
                while not isinstance(item, Begin):
                    items[i].append(item)
                    item = next(streams[i])
            except StopIteration:
                live.discard(i)
                continue
            begun[i] = item.sentence
        made = engine.begin(list(begun.values())) if together and len(begun) > 1 else None
        for k, i in enumerate(begun):
            sent[i] = None if made is None else made[k]
    return items


def test_sentences_begun_together_sound_as_each_alone(weights_cache: Path) -> None:
    """Sentences begun in one round, the first of each text and then the second of the two
    with two, each round's in one batch padded to the longest and masked (``begin``, the
    lane's host step for sessions that begin sentences together): each text's audio and word
    starts are those it has with every sentence begun alone."""
    texts = [*TEXTS.values(), "Two sentences here. And a second one.", "Yes. It is."]
    together, alone = batched_engine(weights_cache), batched_engine(weights_cache)
    got, want = lockstep(together, texts, True), lockstep(alone, texts, False)
    for mine, theirs in zip(got, want, strict=True):
        mine_audio = together.decode_windows([i for i in mine if isinstance(i, Window)])
        theirs_audio = alone.decode_windows([i for i in theirs if isinstance(i, Window)])
        assert [len(a) for a in mine_audio] == [len(a) for a in theirs_audio]
        np.testing.assert_allclose(
            np.concatenate(mine_audio), np.concatenate(theirs_audio), atol=1e-5
        )
        assert [i for i in mine if isinstance(i, WordStarts)] == [
            i for i in theirs if isinstance(i, WordStarts)
        ]
    # Alone, a sentence is what ``synthesize`` makes of it.
    solo = batched_engine(weights_cache)
    (first,) = lockstep(solo, [texts[0]], False)
    synthesized = [
        a for a in batched_engine(weights_cache).synthesize(texts[0], SynthesisOptions())
    ]
    windows = solo.decode_windows([i for i in first if isinstance(i, Window)])
    np.testing.assert_allclose(
        np.concatenate(windows),
        np.concatenate([a for a in synthesized if not isinstance(a, WordStarts)]),
        atol=1e-5,
    )


class _Quiet(MlxPiperEngine):
    """The voice with its noise off: the audio of a text is the same whatever order the
    sessions' encoders run in, so a session's audio can be compared with a lone run's."""

    def __init__(self, cache: Path) -> None:
        super().__init__(cache_dir=cache, config=BATCHED)
        self._noise_scale = self._noise_w = 0.0


@pytest.fixture(scope="module")
async def served(weights_cache: Path) -> AsyncIterator[tuple[list[SpokenTurn], SpokenTurn, int]]:
    """Three sessions speaking at once through a real server on ``mlx-piper``, then one of
    their texts again, alone: the turns, the lone turn, and the largest batch seen."""
    config: ServerConfig = replace(TEST_CONFIG, engine="mlx-piper")
    worker = ComputeWorker(lambda: _Quiet(weights_cache))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VOICEWS_CACHE_DIR", str(weights_cache))
        async with running(config, worker=worker) as srv:
            async with contextlib.AsyncExitStack() as stack:
                clients = [
                    await stack.enter_async_context(await RealtimeClient.connect(srv.url))
                    for _ in TEXTS
                ]
                turns = await asyncio.gather(
                    *(
                        c.speak(text, timeout=timeout(120))
                        for c, text in zip(clients, TEXTS.values(), strict=True)
                    )
                )
            largest = worker.stats.largest_batch
            async with await RealtimeClient.connect(srv.url) as lone:
                again = await lone.speak(TEXTS["a"], timeout=timeout(120))
    yield list(turns), again, largest


def test_sessions_on_one_server_are_served_in_one_batch_and_sound_as_alone(
    served: tuple[list[SpokenTurn], SpokenTurn, int],
) -> None:
    turns, again, largest = served
    print(f"largest batch: {largest}")
    assert largest >= 2, "the sessions' windows were never decoded together"
    for turn, text in zip(turns, TEXTS.values(), strict=True):
        assert turn.done is not None and not turn.done.cancelled and not turn.errors
        assert [w.text for w in turn.words] == text.split()
        assert 0.4 < turn.duration < 2.5
    first = np.frombuffer(bytes(turns[0].pcm), np.int16).astype(np.int32)
    lone = np.frombuffer(bytes(again.pcm), np.int16).astype(np.int32)
    assert len(first) == len(lone)
    assert np.max(np.abs(first - lone)) <= 2  # PCM16 rounding of float32 sums in another order
