"""The onnxruntime session the CPU engines (Piper, Kokoro) share among the worker's lanes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnxruntime import InferenceSession


def lane_session(model: Path) -> InferenceSession:
    """An onnxruntime session whose inferences may each use all the cores. The worker's lanes
    share it: alone, an inference gets every core; side by side, each runs mostly on its own
    lane's thread, since the pool threads sleep when out of work instead of spinning (spinning
    doubled the CPU per second of audio of two-thread inferences on a busy 2-core machine, for
    no gain in speed)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = len(os.sched_getaffinity(0))
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )
