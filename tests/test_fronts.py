"""Front processes (``voicews serve --fronts N``): sessions served by several processes, the
compute by the one that owns the engine.

The pipe between a front and the hub is tested first on the compute worker's fake engine
(``test_worker.Costed``: Piper draws its noise unseeded, so only a deterministic engine shows
that a front gets exactly the events the worker gave). Then the real voice: a front server in
this process, its worker the hub's over a real pipe, with the e2e tests' checks; and
``voicews serve --fronts 2`` itself, with its processes, killed and drained.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import numpy as np
import pytest
from test_e2e import LONG, REPLY, assert_intact
from test_worker import Costed, Gate, Recorder

from conftest import TEST_CONFIG, http_get, running, serving, timeout
from voicews.client import RealtimeClient
from voicews.compute import remote
from voicews.compute.execution import ComputeWorker
from voicews.compute.jobs import Account, JobAudio, JobDone, JobFailed, JobWords
from voicews.compute.remote import Front, Hub, RemoteWorker
from voicews.engines import engine_factory
from voicews.engines.base import Engine, SynthesisOptions
from voicews.protocol import AudioFrame, TurnDone
from voicews.server import VoicewsServer

WAIT = 10.0


@contextmanager
def linked(
    factory: Callable[[], Engine], lanes: int = 1
) -> Iterator[tuple[ComputeWorker, RemoteWorker, Front]]:
    """A worker and its hub here, and a front's view of it over a real pipe."""
    worker = ComputeWorker(factory, lanes)
    worker.start()
    hub = Hub(worker)
    hub.start()
    ours, theirs = multiprocessing.Pipe()
    front = hub.attach(0, ours)
    remote = RemoteWorker(theirs)
    remote.start()
    try:
        yield worker, remote, front
    finally:
        remote.stop()
        hub.stop()
        worker.stop()


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout(WAIT)
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_front_gets_every_event_the_worker_gives_in_order() -> None:
    direct, relayed = Recorder(), Recorder()
    worker = ComputeWorker(Costed)
    worker.start()
    worker.submit(direct.speak("a", "one two three"))
    assert direct.finished.acquire(timeout=WAIT)
    worker.stop()
    with linked(Costed) as (_, remote, _):
        assert (remote.engine_name, remote.sample_rate) == ("costed", 1000)
        remote.submit(relayed.speak("a", "one two three"))
        assert relayed.finished.acquire(timeout=WAIT)
    assert [type(e) for _, e in relayed.events] == [type(e) for _, e in direct.events]
    for (_, got), (_, want) in zip(relayed.events, direct.events, strict=True):
        if isinstance(want, JobAudio):
            assert isinstance(got, JobAudio)
            np.testing.assert_array_equal(got.audio, want.audio)
        else:
            assert got == want
    assert isinstance(relayed.events[-2][1], JobWords)
    assert isinstance(relayed.events[-1][1], JobDone)


def test_a_cancelled_job_gives_nothing_more_and_its_synthesis_is_stopped() -> None:
    engine = Costed()
    gate = engine.gates["two"] = Gate()
    with linked(lambda: engine) as (_, remote, front):
        recorder = Recorder()
        job = recorder.speak("a", "one two three")
        remote.submit(job)
        assert gate.reached.wait(WAIT)
        wait_for(lambda: bool(recorder.events))  # "one", sent before the gate
        remote.cancel(job)
        wait_for(lambda: not front._jobs)  # the hub has cancelled its job
        gate.go.set()
        wait_for(lambda: bool(engine.closed))
        time.sleep(0.05)
    assert engine.computed == ["one", "two"]
    assert [type(e) for _, e in recorder.events] == [JobAudio]
    assert engine.closed == ["one two three on voicews-compute"]


def test_a_session_account_is_kept_while_it_lives_and_forgotten_after() -> None:
    with linked(Costed) as (_, remote, front):
        recorder, account = Recorder(), Account()
        for name in ("a", "b"):
            remote.submit(recorder.speak(name, "one", account=account))
            assert recorder.finished.acquire(timeout=WAIT)
        assert list(front._accounts) == [0]
        kept = front._accounts[0]
        assert kept.clock > 0  # both jobs were charged to the one account
        del account
        gc.collect()
        remote.submit(recorder.speak("c", "one"))  # carries the forget
        assert recorder.finished.acquire(timeout=WAIT)
        wait_for(lambda: not front._accounts)


def test_the_load_a_front_reads_follows_the_worker() -> None:
    engine = Costed()
    gate = engine.gates["one"] = Gate()
    with linked(lambda: engine) as (worker, remote, _):
        wait_for(lambda: remote.warmed.is_set() and remote.load().idle)
        recorder = Recorder()
        remote.submit(recorder.speak("a", "one"))
        assert not remote.load().idle  # at once, before the hub's next reading
        queued = recorder.speak("b", "one more", deadline=time.monotonic() + 5)
        queued.chars = 8  # a segment: the queue counts its compute
        remote.submit(queued)
        assert gate.reached.wait(WAIT)
        wait_for(lambda: len(remote.load().queue) == 1)
        (due, compute), *_ = remote.load().queue
        assert 4 < due <= 5 and compute == worker.load().queue[0][1]
        wait_for(lambda: remote.figures().queued == 1)
        gate.go.set()
        for _ in range(2):
            assert recorder.finished.acquire(timeout=WAIT)
        wait_for(lambda: remote.load().idle and not remote.load().queue)


def test_a_fronts_jobs_fail_when_the_compute_process_goes() -> None:
    engine = Costed()
    gate = engine.gates["two"] = Gate()
    worker = ComputeWorker(lambda: engine)
    worker.start()
    ours, theirs = multiprocessing.Pipe()
    front = Hub(worker).attach(0, ours)
    remote = RemoteWorker(theirs)
    remote.start()
    recorder = Recorder()
    remote.submit(recorder.speak("a", "one two"))
    assert gate.reached.wait(WAIT)
    # The engine's process is gone, as far as the front can tell: its end shut down.
    with socket.socket(fileno=os.dup(ours.fileno())) as end:
        end.shutdown(socket.SHUT_RDWR)
    assert remote.gone.wait(WAIT)
    assert recorder.finished.acquire(timeout=WAIT)
    assert isinstance(recorder.events[-1][1], JobFailed)
    assert "compute process is gone" in recorder.events[-1][1].message
    late = Recorder()
    remote.submit(late.speak("b", "one"))  # after: failed at once, never sent
    assert late.finished.acquire(timeout=WAIT)
    assert [type(e) for _, e in late.events] == [JobFailed]
    gate.go.set()
    front.gone.wait(WAIT)
    worker.stop()


def test_a_front_that_stops_reading_is_cut_off_and_holds_up_no_lane(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote, "MAX_BEHIND", 8)
    worker = ComputeWorker(Costed)
    worker.start()
    hub = Hub(worker)
    hub.start()
    hung, hung_end = multiprocessing.Pipe()  # its end is never read: a front stopped
    for end, option in ((hung, socket.SO_SNDBUF), (hung_end, socket.SO_RCVBUF)):
        with socket.socket(fileno=os.dup(end.fileno())) as sock:
            sock.setsockopt(socket.SOL_SOCKET, option, 4096)  # full after a few messages
    stuck = hub.attach(0, hung)
    words = " ".join(["word"] * 400)
    hung_end.send(remote.Submit(0, words, SynthesisOptions(), 0.0, False, None, 0))
    ours, theirs = multiprocessing.Pipe()
    hub.attach(1, ours)
    live = RemoteWorker(theirs)
    live.start()
    try:
        assert stuck.gone.wait(WAIT)  # cut off, its job cancelled
        recorder = Recorder()
        live.submit(recorder.speak("a", "one two three"))
        assert recorder.finished.acquire(timeout=WAIT)
        assert isinstance(recorder.events[-1][1], JobDone)
        wait_for(lambda: worker.figures().queued == 0)
    finally:
        live.stop()
        hub.stop()
        worker.stop()
        hung_end.close()


@asynccontextmanager
async def front_server() -> AsyncIterator[tuple[VoicewsServer, ComputeWorker]]:
    """A front's server in this process (the tests' config), its worker the real voice's in
    the hub's, over a real pipe."""
    worker = ComputeWorker(engine_factory("piper"), lanes=2, phrase_seconds=10.0)
    await asyncio.to_thread(worker.start)
    hub = Hub(worker)
    hub.start()
    ours, theirs = multiprocessing.Pipe()
    hub.attach(0, ours)
    try:
        async with running(TEST_CONFIG, worker=RemoteWorker(theirs)) as srv:
            yield srv, worker
    finally:
        hub.stop()
        await asyncio.to_thread(worker.stop)


async def test_a_front_speaks_streamed_text_and_barges_in_as_one_process_does() -> None:
    async with front_server() as (srv, worker):
        status, _, body = await http_get(srv.port, "/readyz")
        assert (status, body) == (200, b"ready\n")
        async with await RealtimeClient.connect(srv.url) as client:
            turn = await client.speak(REPLY, tokens_per_s=50, timeout=timeout(30))
            assert_intact(turn)
            assert not turn.errors and turn.end_text_at is not None
            assert turn.frame_times[0] < turn.end_text_at
            assert [w.text for w in turn.words] == REPLY.split()
            await client.turn_reset("long")
            await client.text_delta(LONG)
            await client.end_text()
            item = await client.recv(timeout(20))
            while not isinstance(item, AudioFrame):
                item = await client.recv(timeout(20))
            await client.turn_reset("next")
            while not isinstance(item, TurnDone):
                item = await client.recv(timeout(10))
            assert item.turn_id == "long" and item.cancelled
            turn = await client.speak("Okay, stopping.", timeout=timeout(20))
            assert_intact(turn)
        kept = worker.figures().phrases_kept
        assert kept > 0
        await asyncio.to_thread(wait_for, lambda: srv.worker.figures().phrases_kept == kept)
        _, _, metrics = await http_get(srv.port, "/metrics")
        assert f"voicews_worker_phrases_kept {kept}.0".encode() in metrics  # the hub's figures


FRONT_LOG = re.compile(r"front=(\d) Started server process \[(\d+)\]")
OPENED = re.compile(r"front=(\d) event=session_open")


def fronts_of(log: Path) -> dict[int, int]:
    """Each front's pid, the last started."""
    return {int(i): int(pid) for i, pid in FRONT_LOG.findall(log.read_text(errors="replace"))}


async def test_voicews_serve_fronts_shares_one_engine_restarts_a_dead_front_and_drains(
    tmp_path: Path,
) -> None:
    log = tmp_path / "serve.log"
    with serving(log, "--fronts", "2") as (process, port):
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        clients: list[RealtimeClient] = []
        try:
            # Sessions held open until each front has one (the kernel gives each connection
            # to whichever front accepts first).
            while len(set(OPENED.findall(log.read_text()))) < 2:
                assert len(clients) < 32, "every session went to one front"
                clients.append(await RealtimeClient.connect(url))
                await asyncio.sleep(0.05)
            turns = await asyncio.gather(
                *(c.speak(REPLY, tokens_per_s=20, timeout=timeout(60)) for c in clients[:4])
            )
            for turn in turns:
                assert_intact(turn)
                assert not turn.errors
        finally:
            for client in clients:
                await client.ws.close()
        pids = fronts_of(log)
        assert sorted(pids) == [0, 1]
        os.kill(pids[1], signal.SIGKILL)
        deadline = time.monotonic() + timeout(30)
        while fronts_of(log)[1] == pids[1] or log.read_text().count("front=1 event=listening") < 2:
            assert time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.1)
        assert "event=front_exited front=1 code=-9" in log.read_text()
        for _ in range(4):  # whichever front answers
            async with await RealtimeClient.connect(url) as client:
                turn = await client.speak("Still speaking.", timeout=timeout(20))
                assert_intact(turn)
        live = fronts_of(log)
    assert process.returncode == 0
    text = log.read_text()
    assert text.count("event=drained all_finished=True") == 2
    for pid in live.values():
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] == "Z"


def test_fronts_refuse_agent_mode(tmp_path: Path) -> None:
    import subprocess

    from conftest import SERVE

    done = subprocess.run(
        [*SERVE, "--fronts", "2", "--agent-model", "smollm2"],
        capture_output=True,
        text=True,
        timeout=timeout(60),
    )
    assert done.returncode == 2
    assert "agent mode runs its model in one process: not with --fronts" in done.stderr


@pytest.mark.parametrize("value", ["0", "-1"])
def test_fronts_must_be_at_least_one(value: str) -> None:
    import subprocess

    from conftest import SERVE

    done = subprocess.run(
        [*SERVE, "--fronts", value], capture_output=True, text=True, timeout=timeout(60)
    )
    assert done.returncode == 2 and "must be at least 1" in done.stderr
