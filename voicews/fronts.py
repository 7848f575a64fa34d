"""``voicews serve --fronts N``: sessions served by N front processes, compute by this one.

This process builds the engine (and warms it), binds the listening socket and starts the
fronts, each a fresh interpreter (``spawn``: the engine's threads and any GPU context are not
forked) given the socket and a pipe to this process's :class:`~.compute.remote.Hub`. Every
front accepts on the one socket: the kernel hands each connection to whichever asks first
(40 connections in a row: 22 and 18). A front serves its sessions exactly as the
single process does, through a :class:`~.compute.remote.RemoteWorker`; Wyoming is served by
front 0. A front that dies is started again (its sessions are lost; the others go on). On
SIGTERM or SIGINT every front drains as one process does (``drain_timeout``), then the
engine stops. A front that stops reading its pipe (hung, or stopped) is cut off once
``compute.remote.MAX_BEHIND`` messages wait for it, then killed and started again: the
lanes never wait for it.

Limits are each front's own: ``--max-sessions 64 --fronts 4`` admits up to 256 sessions, and
``/metrics`` is the answering front's (its sessions; the worker's figures are the hub's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from . import heap, logs
from .compute.execution import ComputeWorker
from .compute.remote import Front, Hub, RemoteWorker
from .engines import engine_factory
from .server import ServerConfig, VoicewsServer, log_warmed, realtime_url
from .transport import listening_socket

RESTART_DELAY = 1.0
"""Seconds before a front that died is started again (one that dies at once does not spin)."""
GONE_GRACE = 2.0
"""Seconds a front whose pipe closed (the hub cut it off: it stopped reading) may take to
exit before it is killed."""
LOG_FORMAT = "%(asctime)s level=%(levelname)s {front}%(message)s"


def serve(config: ServerConfig, fronts: int, log_level: str) -> None:
    """Run until SIGTERM or SIGINT, then drain the fronts and stop. Not in agent mode (the
    command line refuses it): its model runs on one process's worker."""
    logs.redact_secrets()
    heap.map_large_buffers()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    sock = listening_socket(config.host, config.port, config.socket_send_buffer)
    sock.listen(1024)
    sock.setblocking(False)
    worker = ComputeWorker(
        engine_factory(config.engine, config.voice),
        config.lanes,
        phrase_seconds=config.phrase_cache_seconds,
    )
    worker.start()
    hub = Hub(worker)
    hub.start()
    group = _Fronts(config, sock, hub, log_level)
    try:
        for index in range(fronts):
            group.start(index)
        if group.wait_listening(stop):
            url = realtime_url(config.host, sock.getsockname()[1])
            logs.event(
                "listening",
                url=url,
                fronts=fronts,
                engine=worker.engine_name,
                sample_rate=worker.sample_rate,
                device=worker.device,
            )
            print(f"voicews: listening on {url}", flush=True)
            threading.Thread(target=log_warmed, args=(worker,), daemon=True).start()
            while not stop.wait(0.2):
                group.restart_dead()
    finally:
        group.stop(config.drain_timeout)
        hub.stop()
        worker.stop()
        sock.close()


class _Fronts:
    def __init__(self, config: ServerConfig, sock: socket.socket, hub: Hub, log_level: str):
        self._config = config
        self._socket = sock
        self._hub = hub
        self._log_level = log_level
        self._context = multiprocessing.get_context("spawn")
        self._processes: dict[int, BaseProcess] = {}
        self._fronts: dict[int, Front] = {}
        self._died: dict[int, float] = {}
        self._cut: dict[int, float] = {}

    def start(self, index: int) -> None:
        # Wyoming's port is one process's: front 0's.
        config = self._config if index == 0 else replace(self._config, wyoming_uri=None)
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=front_main,
            args=(config, index, self._socket, theirs, self._log_level),
            name=f"voicews-front-{index}",
        )
        process.start()
        theirs.close()
        self._processes[index] = process
        self._fronts[index] = self._hub.attach(index, ours)

    def wait_listening(self, stop: threading.Event) -> bool:
        """Until every front accepts (True), or one exits first or we are told to stop."""
        for index, process in self._processes.items():
            front = self._fronts[index]
            while not front.listening.wait(0.1):
                if stop.is_set():
                    return False
                if not process.is_alive():
                    raise RuntimeError(f"front {index} exited with {process.exitcode}")
        return True

    def restart_dead(self) -> None:
        """Start again a front that exited; end one the hub cut off (it stopped reading) or
        whose pipe closed, that is still running ``GONE_GRACE`` later."""
        now = time.monotonic()
        for index, process in list(self._processes.items()):
            if process.is_alive():
                cut = self._fronts[index].gone.is_set()
                if cut and now - self._cut.setdefault(index, now) >= GONE_GRACE:
                    logs.event("front_killed", front=index, why="its pipe is closed")
                    process.kill()
                continue
            self._cut.pop(index, None)
            since = self._died.setdefault(index, now)
            if since == now:
                logs.event("front_exited", front=index, code=process.exitcode)
            if now - since >= RESTART_DELAY:
                del self._died[index]
                self.start(index)

    def stop(self, drain_timeout: float) -> None:
        """SIGTERM each front (it drains), then wait; kill what outlasts the drain."""
        for process in self._processes.values():
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        for process in self._processes.values():
            process.join(drain_timeout + 10.0)
            if process.is_alive():
                process.kill()
                process.join()


def front_main(
    config: ServerConfig, index: int, sock: socket.socket, conn: Connection, log_level: str
) -> None:
    """A front process: serve sessions on ``sock`` until SIGTERM, SIGINT or the hub's end."""
    logging.basicConfig(level=log_level, format=LOG_FORMAT.format(front=f"front={index} "))
    asyncio.run(_front(config, sock, conn))


async def _front(config: ServerConfig, sock: socket.socket, conn: Connection) -> None:
    worker = RemoteWorker(conn)
    server = VoicewsServer(config, worker, sock)
    await server.start()
    worker.listening()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    while not worker.gone.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
            break
    if worker.gone.is_set():
        logs.event("compute_gone")
    await server.close(drain=not worker.gone.is_set())
