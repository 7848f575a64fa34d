"""The onnxruntime sessions the CPU engines (Piper, Kokoro) run the lanes' inferences on."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cache import cache_dir, file_key, write_atomically

if TYPE_CHECKING:
    from onnxruntime import InferenceSession, OrtValue, RunOptions

SHARED_BYTES = 1 << 16
"""Initializers this large are shared among the sessions; smaller ones each session keeps (an
overridden layer-norm weight broke onnxruntime 1.32's graph optimizer)."""

ALIGN = 4096

CALM = 2.0
"""Seconds without two inferences at once after which one that runs alone spins its threads:
a lone first segment's inference then took 42 against 49 ms (traced, median of 15). Spinning
beside other inferences takes their cores (a 16-conversation burst: first audio p95 678 against
634 ms)."""


def external_weights(model: Path) -> Path:
    """The model with its large initializers moved to a ``.weights`` file beside it, made once
    into the cache: the sessions then map one copy of the weights instead of parsing their own."""
    out = cache_dir() / "ort-weights" / f"{model.stem}-{file_key(model)}.onnx"
    if out.is_file() and out.with_suffix(".weights").is_file():
        return out
    import onnx

    graph = onnx.load(str(model))
    blob = bytearray()
    for tensor in graph.graph.initializer:
        if len(tensor.raw_data) < SHARED_BYTES:
            continue
        blob += bytes(-len(blob) % ALIGN)
        offset = len(blob)
        blob += tensor.raw_data
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (
            ("location", out.with_suffix(".weights").name),
            ("offset", str(offset)),
            ("length", str(len(blob) - offset)),
        ):
            tensor.external_data.add(key=key, value=value)
    write_atomically(out.with_suffix(".weights"), bytes(blob))
    write_atomically(out, graph.SerializeToString())
    return out


def _shared_initializers(model: Path) -> dict[str, OrtValue]:
    """The external initializers of ``model`` as values over one read-only mapping of its
    weights file (shared with any other process mapping it)."""
    import onnx
    import onnxruntime

    graph = onnx.load(str(model), load_external_data=False)
    weights = np.memmap(model.with_suffix(".weights"), dtype=np.uint8, mode="r")
    values = {}
    for tensor in graph.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        where = {entry.key: entry.value for entry in tensor.external_data}
        start = int(where["offset"])
        raw = weights[start : start + int(where["length"])]
        array = raw.view(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
        values[tensor.name] = onnxruntime.OrtValue.ortvalue_from_numpy(array.reshape(tensor.dims))
    return values


def lane_session(model: Path) -> InferenceSession:
    """One onnxruntime session whose inferences may each use all the cores, for Kokoro (its int8
    weights are prepacked per session: ``LaneSessions`` cost it 330 against 191 MB). The
    worker's lanes share it: alone, an inference gets every core; side by side, each runs mostly
    on its own lane's thread, since the pool threads sleep when out of work (see below)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = len(os.sched_getaffinity(0))
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )


def describe_session(session: InferenceSession) -> str:
    """The device a session runs on, for the server's log: ``cpu (onnxruntime 1.32.0:
    CPUExecutionProvider)``."""
    import onnxruntime

    providers = ", ".join(session.get_providers())
    return f"cpu (onnxruntime {onnxruntime.__version__}: {providers})"


class Inferences:
    """The inferences running at once on the sessions of one engine (the models of a voice cut
    in two count together), and when one last started beside another."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.crowded = -math.inf

    def start(self, now: float) -> tuple[bool, bool]:
        """With ``lock`` held: one starts ``now``; whether it runs alone, and whether it is
        ``calm``."""
        calm = self.calm(now)
        alone = self.running == 0
        self.running += 1
        if not alone:
            self.crowded = now
        return alone, calm

    def calm(self, now: float) -> bool:
        """None runs now, and none started beside another for ``CALM`` seconds (``lock``
        held, or a glance)."""
        return self.running == 0 and now - self.crowded >= CALM


class LaneSessions:
    """onnxruntime sessions of one model that share its weights and one memory arena: a wide one
    that uses every core, for an inference that runs alone, and a single-threaded one per
    inference side by side (inferences side by side on one session's threads contend: 15-20%
    more time and CPU than on single-threaded sessions). The wide one comes twice: with threads
    that spin while it runs, once inferences have run alone for ``CALM`` seconds, and with
    threads that sleep. ``inferences`` is shared by the sessions of the models one engine runs."""

    def __init__(
        self, model: Path, narrow: int | None = None, inferences: Inferences | None = None
    ) -> None:
        cores = len(os.sched_getaffinity(0))
        _register_arena()
        self._model = external_weights(model)
        self._initializers = _shared_initializers(self._model)
        self._inferences = inferences or Inferences()
        self._lock = self._inferences.lock
        self._wide = self._session(cores)
        self._spinning = self._session(cores, spin=True) if cores > 1 else self._wide
        self._idle = [self._session(1) for _ in range(cores if narrow is None else narrow)]
        self._run_options = _shrinking()

    def _session(self, threads: int, spin: bool = False) -> InferenceSession:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        # Pool threads sleep when out of work (spinning doubled the CPU per second of audio of
        # two-thread inferences on a busy 2-core machine), or spin until the inference ends.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        options.add_session_config_entry("session.force_spinning_stop", "1" if spin else "0")
        options.add_session_config_entry("session.use_env_allocators", "1")
        for name, value in self._initializers.items():
            options.add_initializer(name, value)
        return onnxruntime.InferenceSession(
            str(self._model), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def run(
        self, output_names: list[str] | None, feeds: dict[str, Any], spin: bool = True
    ) -> list[Any]:
        """``InferenceSession.run``; ``spin=False``: never on the spinning session, for an
        inference no listener waits on (the rest of a sentence after its first window): its
        spinning threads held both cores while the event loop sent the first window (traced
        over 20 lone first segments: sent 1.4 against 4.3 ms after it came, median)."""
        with self._lock:
            session = self._choose(time.monotonic(), spin)
        try:
            if session is None:  # more inferences at once than sessions made: one more
                session = self._session(1)
            outputs: list[Any] = session.run(output_names, feeds, self._run_options)
            return outputs
        finally:
            with self._lock:
                self._inferences.running -= 1
                if session is not None and session not in (self._wide, self._spinning):
                    self._idle.append(session)

    @property
    def device(self) -> str:
        """Where the sessions run (``describe_session``)."""
        return describe_session(self._wide)

    def get_inputs(self) -> list[Any]:
        """The model's inputs, as ``InferenceSession.get_inputs`` gives them."""
        inputs: list[Any] = self._wide.get_inputs()
        return inputs

    def _choose(self, now: float, spin: bool = True) -> InferenceSession | None:
        """With the lock held: the session for an inference starting ``now`` (None: make one)."""
        alone, calm = self._inferences.start(now)
        if not alone:
            return self._idle.pop() if self._idle else None
        return self._spinning if calm and spin else self._wide


def _shrinking() -> RunOptions:
    """Run options that give the shared arena's free regions back after each inference: it
    otherwise keeps the peak of the largest one for good (a long input's inferences grew the
    server by 126 MiB, kept with no client left). Given back to glibc, they leave the process
    only as buffers mapped on their own (``voicews.heap.map_large_buffers``)."""
    import onnxruntime

    options = onnxruntime.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


_arena_lock = threading.Lock()
_arena = False


def _register_arena() -> None:
    """One CPU memory arena for every session in the process, registered once: a session's own
    arena keeps the peak of its largest inference (80-160 MB for Piper)."""
    global _arena
    import onnxruntime

    with _arena_lock:
        if not _arena:
            onnxruntime.create_and_register_allocator(
                onnxruntime.OrtMemoryInfo(
                    "Cpu",
                    onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR,
                    0,
                    onnxruntime.OrtMemType.DEFAULT,
                ),
                None,
            )
            _arena = True
