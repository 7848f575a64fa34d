"""Agent mode: a language model that writes the replies the session speaks.

The model is loaded and run on the compute worker's thread (MLX streams are bound to the
thread that made them), one token per worker step, so generation interleaves with speech.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from .engines.base import Engine, SynthesisOptions
from .worker import ComputeWorker, Job, JobDone, JobEvent, JobFailed, Work


class AgentBackend:
    """``model`` is an mlx-lm directory, a Hugging Face repo id, or a ``.gguf`` file."""

    def __init__(self, model: str) -> None:
        self.model_name = model
        self._loaded: tuple[Any, Any] | None = None

    def new_cache(self) -> Any:
        """A per-session prompt cache: the next turn re-reads only what the history added
        (on a CPU, prefill runs about as slowly as generation)."""
        from .llm.generate import PromptCache

        return PromptCache()

    def work(self, messages: Sequence[dict[str, str]], max_tokens: int, cache: Any) -> Work:
        def generate(_engine: Engine) -> Iterator[str]:
            from .llm.generate import stream_reply

            model, tokenizer = self._model()
            yield from stream_reply(
                model, tokenizer, list(messages), max_tokens=max_tokens, cache=cache
            )

        return generate

    def preload(self, worker: ComputeWorker) -> None:
        """Load (and convert, the first time) the model on the worker thread; blocks."""
        done = threading.Event()
        failure: list[str] = []

        def on_event(event: JobEvent) -> None:
            if isinstance(event, JobFailed):
                failure.append(event.message)
            if isinstance(event, JobDone | JobFailed):
                done.set()

        def load(_engine: Engine) -> Iterator[str]:
            self._model()
            yield from ()

        worker.submit(Job("", SynthesisOptions(), True, 0.0, on_event, work=load))
        done.wait()
        if failure:
            raise RuntimeError(f"agent model {self.model_name!r} failed to load: {failure[0]}")

    def _model(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from .llm.convert import load

            self._loaded = load(self.model_name)
        return self._loaded
