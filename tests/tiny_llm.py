"""A tiny random llama for fast tests: an mlx-lm model directory built in well under a second.

Two layers, hidden size 64, a byte-level BPE tokenizer of about 500 tokens trained on the spot
(``tokenizers``) on a small built-in corpus, and a ChatML template. It is saved the way mlx-lm
saves models and loads through the same ``load`` a user's real model goes through, so tests
exercise the real path: chat template, ``stream_generate``, the streaming detokenizer.

Its replies are random subwords of the corpus. Two choices keep them speakable: the alphabet
is printable ASCII (no stray byte tokens that decode to replacement characters), and the
special tokens can never be sampled, so a reply always runs to ``max_tokens``, which makes
reply lengths in tests exact. The second is done with weights, not a sampler: residual
dimension 0 holds a constant (the embeddings set it, no layer writes to it), so after the final
norm it is always positive, and the untied output head gives the special tokens a large
negative weight on it.

``python tests/tiny_llm.py OUT_DIR`` builds one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CORPUS = """\
Hello there, how can I help you today?
Sure, I can help with that. The forecast for tomorrow is sunny, with a light breeze.
Good question. The train leaves at half past nine, and the trip takes about two hours.
Here is a short story. Once upon a time, a small robot lived in a quiet town by the sea.
Every morning it walked to the harbor, counted the boats, and said hello to the fishermen.
One day a storm came in from the west, and the boats did not come back before dark.
The robot climbed the old tower, turned on the lamp, and waited through the long night.
In the morning every boat was home, and the town made the robot a little golden hat.
I think the best way to learn a language is to speak it a little every single day.
You could start with simple words, then short sentences, and then real conversations.
The capital of France is Paris, and the capital of Italy is Rome.
Water boils at one hundred degrees at sea level, and it freezes at zero.
Let me check that for you. It looks like the store opens at eight and closes at six.
Thanks for asking! I am doing well, and I hope your day is going nicely too.
To make a cup of tea, boil the water, pour it over the leaves, and wait three minutes.
Please remember to take an umbrella, because it may rain later this afternoon.
That sounds like a great plan. Would you like me to set a reminder for it?
The meeting is on Tuesday at ten, in the large room on the second floor.
Music, books and long walks are good ways to relax after a busy week.
Sorry, I did not catch that. Could you say it again, a little more slowly?
"""
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_CONSTANT = 4.0  # residual dimension 0, kept constant through the layers
_SPECIAL_PENALTY = -10.0  # output weight of special tokens on that dimension


def build_tiny_model(
    out_dir: str | Path,
    seed: int = 0,
    *,
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
) -> Path:
    """Write a random llama with a freshly trained tokenizer to ``out_dir``; same seed, same
    weights. Runs MLX: call it on the thread that will use the model, or in a test."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs
    from mlx_lm.utils import save_config, save_model

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
    config: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 2,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": hidden_size // 4,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "vocab_size": tokenizer.get_vocab_size(),
        "tie_word_embeddings": False,
        "bos_token_id": ids["<|im_start|>"],
        "eos_token_id": ids["<|im_end|>"],
    }
    mx.random.seed(seed)
    model = Model(ModelArgs.from_dict(config))  # type: ignore[no-untyped-call]
    weights = dict(tree_flatten(model.parameters()))
    weights["model.embed_tokens.weight"][:, 0] = _CONSTANT
    for i in range(num_layers):
        weights[f"model.layers.{i}.self_attn.o_proj.weight"][0, :] = 0.0
        weights[f"model.layers.{i}.mlp.down_proj.weight"][0, :] = 0.0
    head = weights["lm_head.weight"]
    head[:, 0] = 0.0
    for token_id in ids.values():
        head[token_id, 0] = _SPECIAL_PENALTY
    model.load_weights(list(weights.items()))
    mx.eval(model.parameters())
    save_model(out, model)
    save_config(config, config_path=out / "config.json")
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    return out


def _train_tokenizer(vocab_size: int) -> Any:
    """Byte-level BPE over printable ASCII, trained on :data:`CORPUS`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    byte_chars = _bytes_to_unicode()
    alphabet = [byte_chars[b] for b in [*range(0x20, 0x7F), ord("\n")]]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(keepends=True), trainer)
    return tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, as byte-level BPE vocabularies spell bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


if __name__ == "__main__":
    print(build_tiny_model(sys.argv[1] if len(sys.argv) > 1 else "tiny-model"))
