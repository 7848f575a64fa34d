"""Piper voices on MLX (``voicews serve --engine mlx-piper``): GPU where MLX has one.

Importing this package imports neither MLX nor ONNX: the compute worker builds the engine on
its own thread, and everything MLX runs there.
"""

from __future__ import annotations

from .engine import MlxPiperEngine

__all__ = ["MlxPiperEngine"]
