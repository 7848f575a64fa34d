"""Server side of a voice agent (agent mode): a language model writes the replies it speaks.

The model is loaded and run on the compute worker's thread (MLX streams are bound to the
thread that made them), one token per worker step, so generation interleaves with speech.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..compute.execution import ComputeWorker
from ..compute.jobs import Job, JobDone, JobEvent, JobFailed, Work
from ..core.jobs import GenerationRequest
from ..engines.base import Engine


class AgentBackend:
    """``model`` is an mlx-lm directory, a Hugging Face repo id, or a ``.gguf`` file."""

    def __init__(self, model: str) -> None:
        self.model_name = model
        self._loaded: tuple[Any, Any] | None = None

    def generator(self) -> Callable[[GenerationRequest], Work]:
        """The work that answers one session's generation requests. The session keeps its
        prompt cache: the next turn re-reads only what the history added (on a CPU, prefill
        runs about as slowly as generation)."""
        from ..llm.generate import PromptCache, stream_reply

        cache = PromptCache()

        def work(request: GenerationRequest) -> Work:
            def generate(_engine: Engine) -> Iterator[str]:
                model, tokenizer = self._model()
                config = request.config
                yield from stream_reply(
                    model,
                    tokenizer,
                    list(request.messages),
                    max_tokens=config.max_tokens,
                    temperature=config.temperature,
                    top_p=config.top_p,
                    cache=cache,
                )

            return generate

        return work

    def preload(self, worker: ComputeWorker) -> None:
        """Load (and convert, the first time) the model on the worker thread; blocks."""
        if worker.stats.lanes > 1:
            raise ValueError(
                "agent mode needs a compute worker with one lane: the model is bound to the "
                "thread that loads it"
            )
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

        worker.submit(Job(load, deadline=0.0, on_event=on_event))
        done.wait()
        if failure:
            raise RuntimeError(f"agent model {self.model_name!r} failed to load: {failure[0]}")

    def _model(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from ..llm.convert import load

            self._loaded = load(self.model_name)
        return self._loaded
