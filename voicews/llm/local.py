"""A language model on a thread of its own, for a client-side agent.

MLX streams are bound to the thread that uses them: loading and every generation run on one
thread, in order, so a stopped generation has finished (and its prompt cache is consistent)
before the next begins. The server's agent mode runs its model on the compute worker instead
(:mod:`voicews.agent.server`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.conversation import Message
from .generate import PromptCache, ReplyStats, chat_tokens, stream_reply

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module


class LocalLLM:
    """An mlx-lm model and its prompt cache, on the model's own thread."""

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
