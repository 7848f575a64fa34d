"""Stream a chat reply as text deltas, stoppable between any two tokens.

A voice agent forwards each delta to voicews the moment it exists, and must stop generating
the moment the user barges in; ``stream_reply`` checks ``stop()`` after every token. A
:class:`PromptCache` keeps the KV cache across turns, so each turn prefills only what is new:
on a CPU, prefill runs at about the generation rate, and re-reading a long history every turn
would delay the first word by seconds.

Call everything here on the one thread that owns the model (MLX streams are bound to it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.conversation import Message

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module


def _never() -> bool:
    return False


@dataclass
class ReplyStats:
    """Filled in by :func:`stream_reply`, for logs, benchmarks and tests."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    tokens: int = 0
    stopped: bool = False
    finish_reason: str | None = None
    prompt_tps: float = 0.0
    generation_tps: float = 0.0


@dataclass
class PromptCache:
    """A KV cache and the token ids it holds, reused while the new prompt shares its prefix.

    After a barge-in the history keeps only the heard part of a reply, so the cache is
    trimmed back to where the new prompt departs from what it holds.
    """

    cache: list[Any] | None = None
    tokens: list[int] = field(default_factory=list)

    def prepare(self, model: Module, prompt: Sequence[int]) -> tuple[list[int], list[Any]]:
        """The part of ``prompt`` still to feed, and the cache holding the rest."""
        from mlx_lm.models.cache import (
            can_trim_prompt_cache,
            make_prompt_cache,
            trim_prompt_cache,
        )

        if self.cache is None:
            self.cache, self.tokens = make_prompt_cache(model), []
        common = 0
        for held, new in zip(self.tokens, prompt, strict=False):
            if held != new:
                break
            common += 1
        common = min(common, len(prompt) - 1)  # at least one token must be fed
        excess = len(self.tokens) - common
        if excess > 0:
            if can_trim_prompt_cache(self.cache):
                trim_prompt_cache(self.cache, excess)
            else:
                self.cache, common = make_prompt_cache(model), 0
        self.tokens = list(prompt[:common])
        return list(prompt[common:]), self.cache

    def prefill(self, model: Module, prompt: Sequence[int]) -> None:
        """Run ``prompt`` through the model into the cache, ahead of the turn that needs it."""
        import mlx.core as mx

        feed, cache = self.prepare(model, prompt)
        model(mx.array(feed)[None], cache=cache)
        mx.eval([c.state for c in cache])
        self.tokens = list(prompt)

    def record(self, fed: Sequence[int]) -> None:
        """After generation: the cache now holds ``fed`` (prompt then tokens), up to its size."""
        assert self.cache is not None
        held = int(getattr(self.cache[0], "offset", len(fed)))
        if held > len(fed):  # fed tokens we never saw: drop them rather than guess
            from mlx_lm.models.cache import trim_prompt_cache

            trim_prompt_cache(self.cache, held - len(fed))
            held = len(fed)
        self.tokens = list(fed[:held])


def stream_reply(
    model: Module,
    tokenizer: Any,
    history: Sequence[Message],
    max_tokens: int = 256,
    stop: Callable[[], bool] = _never,
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    cache: PromptCache | None = None,
    stats: ReplyStats | None = None,
) -> Iterator[str]:
    """Text deltas of the assistant's reply to ``history``, as ``mlx_lm.stream_generate`` makes
    them; ``stop()`` is checked before the first token and after each one, so once it is true
    no further delta is yielded and at most the one token already in flight is computed.
    """
    from mlx_lm import stream_generate
    from mlx_lm.sample_utils import make_sampler

    stats = stats if stats is not None else ReplyStats()
    prompt = chat_tokens(tokenizer, history)
    stats.prompt_tokens = len(prompt)
    if stop():
        stats.stopped = True
        return
    feed: list[int] = prompt
    kv: list[Any] | None = None
    if cache is not None:
        feed, kv = cache.prepare(model, prompt)
        stats.cached_tokens = len(prompt) - len(feed)
    generated: list[int] = []
    try:
        for response in stream_generate(
            model,
            tokenizer,
            feed,
            max_tokens=max_tokens,
            sampler=make_sampler(temp=temperature, top_p=top_p),
            prompt_cache=kv,
        ):
            generated.append(int(response.token))
            stats.tokens = int(response.generation_tokens)
            stats.prompt_tps = float(response.prompt_tps)
            stats.generation_tps = float(response.generation_tps)
            stats.finish_reason = response.finish_reason
            if response.text:
                yield response.text
            if stop():
                stats.stopped = True
                break
    finally:
        if cache is not None:
            cache.record(prompt + generated)


def chat_tokens(
    tokenizer: Any, messages: Sequence[Message], add_generation_prompt: bool = True
) -> list[int]:
    """The chat template applied to ``messages``, as token ids."""
    return _token_ids(
        tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt)
    )


def _token_ids(encoded: Any) -> list[int]:
    """Token ids from ``apply_chat_template``, whichever shape this transformers returns."""
    if hasattr(encoded, "keys") and "input_ids" in encoded:
        encoded = encoded["input_ids"]
    return [int(t) for t in encoded]
