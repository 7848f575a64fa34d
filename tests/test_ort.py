"""The onnxruntime session the Piper and Kokoro engines share among the worker's lanes."""

from __future__ import annotations

import os

from voicews.engines.ort import lane_session
from voicews.engines.piper import bundled_voice


def test_a_lane_session_may_use_every_core_and_its_pool_threads_sleep() -> None:
    options = lane_session(bundled_voice()).get_session_options()
    assert options.intra_op_num_threads == len(os.sched_getaffinity(0))
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
