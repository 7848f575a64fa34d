"""How close a windowed decode is to the one-shot one, and how many MLX operations it costs,
for ``mlx_chunked.py``, ``mlx_ops.py`` and the MLX tests.

Measures only: the engine never needs them, so they are not shipped with it.
"""

from __future__ import annotations

import io
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt


def snr_db(test: npt.ArrayLike, reference: npt.ArrayLike) -> float:
    """Signal-to-noise ratio of ``test`` against ``reference`` in dB (inf when identical)."""
    t, r = np.asarray(test, np.float64), np.asarray(reference, np.float64)
    n = min(len(t), len(r))
    error = float(((t[:n] - r[:n]) ** 2).sum())
    return math.inf if error == 0.0 else 10.0 * math.log10(float((r[:n] ** 2).sum()) / error)


def join_jumps(
    audio: npt.ArrayLike,
    reference: npt.ArrayLike,
    plan: Sequence[tuple[int, int]],
    hop: int,
    radius: int,
) -> tuple[float, float]:
    """Sample steps at window joins: (largest step across a join, largest excess step nearby).

    The first is ``|y[j] - y[j - 1]|`` at each join sample ``j``; the second the largest
    difference from the one-shot waveform's own step within ``radius`` samples of a join,
    which is what a click adds on top of the speech's own slope.
    """
    a, r = np.asarray(audio, np.float64), np.asarray(reference, np.float64)
    steps, excess_steps = np.diff(a), np.abs(np.diff(a) - np.diff(r))
    joins = [start * hop for start, _ in plan[1:]]
    worst = max((abs(float(steps[j - 1])) for j in joins), default=0.0)
    excess = max(
        (float(excess_steps[max(0, j - 1 - radius) : j + radius].max()) for j in joins),
        default=0.0,
    )
    return worst, excess


_NODE = re.compile(r'label ="([^"]+)", shape=rectangle')


def graph_ops(*arrays: Any) -> Counter[str]:
    """The operations (by primitive) of the lazy MLX graph behind ``arrays``, not evaluated:
    what an ``eval`` of them would dispatch (walked with ``mx.export_to_dot``)."""
    import mlx.core as mx

    dot = io.StringIO()
    mx.export_to_dot(dot, *arrays)
    return Counter(_NODE.findall(dot.getvalue()))
