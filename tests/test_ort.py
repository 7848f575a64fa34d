"""The onnxruntime sessions the Piper and Kokoro engines run the worker's lanes' inferences on."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from conftest import side_by_side
from voicews.engines.ort import (
    CALM,
    SHARED_BYTES,
    LaneSessions,
    external_weights,
    lane_session,
)
from voicews.engines.piper import bundled_voice, with_durations

FEEDS = {
    "input": np.array([[1, 20, 30, 40, 50, 60, 70, 80, 90, 2]], dtype=np.int64),
    "input_lengths": np.array([10], dtype=np.int64),
    "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),  # no noise: the same audio each time
}


def test_the_weights_move_to_one_file_the_sessions_share() -> None:
    model = external_weights(with_durations(bundled_voice()))
    graph = onnx.load(str(model), load_external_data=False)
    external = [t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert sum(int(e.value) for t in external for e in t.external_data if e.key == "length") > (
        50 << 20
    )
    assert all(len(t.raw_data) < SHARED_BYTES for t in graph.graph.initializer)
    assert external_weights(with_durations(bundled_voice())) == model  # made once


def test_a_lone_inference_may_use_every_core_and_side_by_side_ones_one_each() -> None:
    sessions = LaneSessions(with_durations(bundled_voice()), narrow=2)
    wide = sessions._wide.get_session_options()
    assert wide.intra_op_num_threads == len(os.sched_getaffinity(0))
    for session in [sessions._wide, *sessions._idle]:
        options = session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert options.get_session_config_entry("session.use_env_allocators") == "1"
    assert [s.get_session_options().intra_op_num_threads for s in sessions._idle] == [1, 1]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: nothing to spin for")
def test_a_lone_inference_spins_its_threads_only_while_inferences_have_run_alone() -> None:
    sessions = LaneSessions(with_durations(bundled_voice()), narrow=2)
    spinning = sessions._spinning.get_session_options()
    assert spinning.intra_op_num_threads == len(os.sched_getaffinity(0))
    for key in ("session.intra_op.allow_spinning", "session.force_spinning_stop"):
        assert spinning.get_session_config_entry(key) == "1"
    narrow = sessions._idle[-1]
    assert sessions._choose(now=100.0) is sessions._spinning  # alone, and always was
    assert sessions._choose(now=100.1) is narrow  # beside it: a narrow one, and crowded
    sessions._inferences.running = 0
    assert sessions._choose(now=100.1 + CALM / 2) is sessions._wide  # alone, but crowded lately
    sessions._inferences.running = 0
    assert sessions._choose(now=100.1 + CALM) is sessions._spinning  # calm again
    sessions._inferences.running = 0
    assert sessions._choose(now=100.1 + CALM, spin=False) is sessions._wide  # none waits on it


def test_inferences_side_by_side_give_what_one_alone_gives() -> None:
    sessions = LaneSessions(with_durations(bundled_voice()), narrow=1)
    alone = sessions.run(None, FEEDS)[0]
    results = side_by_side(lambda: sessions.run(None, FEEDS)[0], threads=4, runs=3)
    assert len(results) == 12
    for audio in results:
        np.testing.assert_allclose(audio, alone, atol=1e-4)
    assert sessions._inferences.running == 0


def test_kokoros_shared_session_may_use_every_core_and_its_pool_threads_sleep() -> None:
    options = lane_session(bundled_voice()).get_session_options()
    assert options.intra_op_num_threads == len(os.sched_getaffinity(0))
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
