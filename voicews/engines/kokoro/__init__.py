"""Kokoro-82M v1.0 (Apache-2.0), offline: ``voicews serve --engine kokoro [--voice af_heart]``.

``assets`` (model, config, voices), ``phonemes`` (text -> token ids) and ``words`` (where
each word starts) are shared by every Kokoro engine; ``engine`` runs the model on onnxruntime
(``graphs``: the graphs made from the shipped one), ``mlx_engine`` on MLX (``mlx_model``).
Importing this package imports neither onnxruntime nor ONNX: the compute worker builds the
engine on its own thread.
"""

from __future__ import annotations

from .engine import KokoroEngine

__all__ = ["KokoroEngine"]
