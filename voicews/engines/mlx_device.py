"""Where MLX computes, for the server's log, and where its compiled kernels are kept.

Shared by the MLX engines (``mlx_piper``, ``kokoro.mlx_engine``); nothing here imports MLX at
import time.
"""

from __future__ import annotations

import os
from pathlib import Path


def keep_compiled_kernels(cache_dir: Path | None = None) -> None:
    """Points MLX's CUDA kernel cache (``MLX_PTX_CACHE_DIR``) at ``$VOICEWS_CACHE_DIR/mlx-ptx``
    unless it is set: MLX's default, ``/tmp/mlx/<version>/ptx``, is lost with ``/tmp`` (a
    fresh container, a reboot), and then the first window compiles its kernels again (10-14 s
    on an H200). Read once, at MLX's first kernel compilation; Metal keeps no such cache."""
    from ..cache import cache_dir as default_cache_dir

    folder = (cache_dir or default_cache_dir()) / "mlx-ptx"
    os.environ.setdefault("MLX_PTX_CACHE_DIR", str(folder))


def describe_device() -> str:
    """MLX's default device and its backend, for the server's log: ``gpu (cuda: NVIDIA H200)``.

    ``voicews serve`` logs it once the compute worker has built the engine, so a deployment
    shows whether the GPU is in use (a CPU-only wheel falls back silently otherwise).
    """
    import mlx.core as mx

    device = mx.default_device()
    if device == mx.cpu:
        return "cpu"
    if mx.cuda.is_available():
        backend = "cuda"
    elif mx.metal.is_available():
        backend = "metal"
    else:
        backend = "unknown"
    try:
        name = str(mx.device_info().get("device_name", ""))
    except (AttributeError, RuntimeError):
        name = ""
    return f"gpu ({backend}: {name})" if name else f"gpu ({backend})"
