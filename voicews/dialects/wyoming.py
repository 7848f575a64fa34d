"""Wyoming text to speech (Home Assistant) beside the WebSocket, through the same sessions.

``voicews serve --wyoming-uri tcp://HOST:PORT``. Each Wyoming connection that asks for speech
becomes one session of the app (counted against ``max_sessions``, drained on shutdown), so the
text goes through the same segmenter, stitcher and compute worker as on the WebSocket. A
connection may speak several turns, one at a time; each is either

- streamed: ``synthesize-start``, ``synthesize-chunk``*, ``synthesize-stop``, answered with
  ``audio-start``, ``audio-chunk``*, ``audio-stop`` and ``synthesize-stopped``. Home Assistant
  also sends the whole text as a one-shot ``synthesize`` inside the stream, for servers that
  cannot stream; it is ignored there, as wyoming-piper does; or
- one-shot: ``synthesize``, answered with ``audio-start``, ``audio-chunk``*, ``audio-stop``.

``describe`` lists the voices a session may choose (``engine_voices``); a turn speaks the voice
its ``synthesize-start`` or ``synthesize`` names if the engine has it, else the server's default
(Home Assistant sends the voice configured for it, which may be another server's). A closed
connection cancels its synthesis. Wyoming has no authentication and no word timings.

A peer gets the bounds a WebSocket peer gets (:mod:`voicews.transport`), where they apply: its
connection counts against the connection cap; an event must be whole within the request
timeout once its first byte is in, and at most :func:`max_event_bytes` (the ``wyoming`` package
reads lines and payloads of any size, for as long as they take, so we read events ourselves);
the reader stops while the session's outbox is full; and, Wyoming having no ping, a peer that
leaves what we send unread for ``write_timeout`` is gone, as is one whose host vanished
(TCP keepalive and a bound on unacknowledged data, on Linux). A peer gone without a close is
counted in ``voicews_sessions_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error as WyomingError
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.server import AsyncEventHandler
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from .. import logs
from ..admission import Admission
from ..core.config import SessionConfig, SettingsUpdate
from ..core.events import AudioFrame, Error, TurnDone
from ..core.session import Session
from ..driver import SessionDriver
from ..protocol import MAX_JSON_DEPTH, too_deep
from ..transport import TransportLimits, TransportPolicy, listening_socket
from .wyoming_info import describe, parse_uri

_WIDTH = 2  # bytes per sample: 16-bit PCM, mono


class WyomingServer:
    """Listens on ``tcp://HOST:PORT``; every connection is served by :class:`WyomingConnection`."""

    def __init__(
        self,
        admission: Admission,
        config: SessionConfig,
        uri: str,
        policy: TransportPolicy,
        voice: str | None = None,
        socket_send_buffer: int = 128 * 1024,
    ) -> None:
        self._admission = admission
        self._config = config
        self._policy = policy
        self._host, self._port = parse_uri(uri)
        voice_file = Path(voice) if voice is not None else None
        self._info = describe(admission.worker.engine_name, config.voices, voice_file)
        self._send_buffer = socket_send_buffer
        self._server: asyncio.Server | None = None
        self._handlers: dict[asyncio.Task[None], WyomingConnection] = {}

    async def start(self) -> None:
        sock = listening_socket(self._host, self._port, self._send_buffer)
        # The reader's limit bounds a line: past it, readline raises instead of buffering on.
        limit = max_event_bytes(self._config)
        self._server = await asyncio.start_server(self._accept, sock=sock, limit=limit)
        logs.event("listening", url=self.uri, protocol="wyoming")

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def open_connections(self) -> int:
        return len(self._handlers)

    @property
    def uri(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"tcp://{host}:{self.port}"

    async def close(self) -> None:
        """Stop listening and close every connection (which cancels its synthesis)."""
        if self._server is not None:
            self._server.close()
        for handler in list(self._handlers.values()):
            await handler.stop()
        if self._handlers:
            await asyncio.wait(list(self._handlers))
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limits = self._policy.limits
        if self._policy.open_connections() >= limits.max_connections:
            self._policy.dropped("connection_cap")
            writer.transport.abort()
            return
        _keepalive(writer, limits.write_timeout)
        handler = WyomingConnection(
            self._admission, self._config, self._info, reader, writer, self._policy
        )
        task = asyncio.create_task(handler.run(), name="voicews wyoming connection")
        self._handlers[task] = handler
        task.add_done_callback(self._handlers.pop)


@dataclass
class _Turn:
    streamed: bool
    audio_started: bool = False


class _Dropped(Exception):
    """The peer broke the framing or a bound: the connection closes (``reason`` as the
    transport's ``dropped`` names it)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class WyomingConnection(AsyncEventHandler):
    """One Wyoming client. Events are read one at a time; what the session sends back goes out
    from a task of its own, so reading never waits for synthesis."""

    def __init__(
        self,
        admission: Admission,
        config: SessionConfig,
        info: Info,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        policy: TransportPolicy,
    ) -> None:
        super().__init__(reader, writer)
        self._admission = admission
        self._config = config
        self._info = info
        self._policy = policy
        self._limits: TransportLimits = policy.limits
        self._lost = False
        self._client = _peer(writer)
        self._driver: SessionDriver | None = None
        self._sender: asyncio.Task[None] | None = None
        self._turn_ids = (f"w{n}" for n in itertools.count(1))
        self._turns: dict[str, _Turn] = {}
        self._streaming: str | None = None  # the streamed turn whose text is still arriving

    async def run(self) -> None:
        """Serve events until the peer closes, the server stops it, or the peer breaks a
        bound; its session, if any, ends with it."""
        try:
            while (event := await self._read_event()) is not None:
                if not await self.handle_event(event) or not await self._room():
                    break
        except _Dropped as exc:
            self._policy.dropped(exc.reason)
            logs.event("error", protocol="wyoming", code="invalid_event", detail=exc)
        except OSError:  # a reset, or what we sent left unread for write_timeout
            self._lost = True
        finally:
            await self.disconnect()
            self.writer.close()

    async def _room(self) -> bool:
        """Wait until the session takes more input (its client reads what it is sent: a
        client that does not is not read either); False once its sender has ended."""
        if self._driver is None or self._sender is None:
            return True
        room = asyncio.ensure_future(self._driver.room_for_input())
        try:
            await asyncio.wait({room, self._sender}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            room.cancel()
        return not self._sender.done()

    async def _read_event(self) -> Event | None:
        """The next event; None once the peer or the server closed. Waiting for an event is
        unbounded (the session's idle timeout ends an idle connection that holds a slot), but
        from its first byte an event must be whole within ``head_timeout``, and no larger than
        :func:`max_event_bytes`."""
        if not (first := await self.reader.read(1)):
            return None
        seconds, limit = self._limits.head_timeout, max_event_bytes(self._config)
        try:
            async with asyncio.timeout(seconds):
                line = first + await self.reader.readline()  # ValueError past the limit
                if not line.endswith(b"\n"):
                    return None  # closed mid-line
                header = _json_object(line)
                if not isinstance(kind := header["type"], str):
                    raise TypeError("the event type must be a string")
                data_length = header.get("data_length") or 0
                payload_length = header.get("payload_length") or 0
                if not isinstance(data_length, int) or not isinstance(payload_length, int):
                    raise ValueError("data_length and payload_length must be integers")
                if (size := len(line) + data_length + payload_length) > limit:
                    raise ValueError(f"event of {size} bytes; the limit is {limit}")
                data = header.get("data") or {}
                if data_length > 0:
                    data = {**data, **_json_object(await self.reader.readexactly(data_length))}
                payload = await self.reader.readexactly(payload_length) if payload_length else None
                return Event(type=kind, data=data, payload=payload)
        except TimeoutError:
            raise _Dropped("head_timeout", f"event not whole within {seconds:g} s") from None
        except asyncio.IncompleteReadError:
            return None  # closed mid-event
        except (KeyError, TypeError, ValueError) as exc:  # not an event: the framing is lost
            raise _Dropped("invalid_request", f"{type(exc).__name__}: {exc}") from None

    async def write_event(self, event: Event) -> None:
        """Send ``event``; a peer that leaves it unread for ``write_timeout`` is gone (Wyoming
        has no ping): the connection is aborted."""
        try:
            async with asyncio.timeout(self._limits.write_timeout):
                await super().write_event(event)
        except TimeoutError:
            self._lost = True
            self.writer.transport.abort()
            seconds = self._limits.write_timeout
            raise ConnectionAbortedError(f"peer left our events unread for {seconds:g} s") from None
        except OSError:
            self._lost = True  # reset while we wrote
            raise

    async def handle_event(self, event: Event) -> bool:
        try:
            return await self._dispatch(event)
        except (KeyError, TypeError, ValueError) as exc:  # ValidationError is a ValueError
            await self._refuse("invalid_event", f"{event.type}: {exc}")
            return True

    async def _dispatch(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            await self.write_event(self._info.event())
            return True
        if SynthesizeStart.is_type(event.type):
            return await self._start_turn(SynthesizeStart.from_event(event).voice, streamed=True)
        if SynthesizeChunk.is_type(event.type):
            if self._streaming is None:
                await self._refuse("no_stream", "synthesize-chunk outside synthesize-start/stop")
                return True
            text = _text(SynthesizeChunk.from_event(event).text)
            with self._session() as (session, now):
                session.text_delta(text, now)
            return True
        if SynthesizeStop.is_type(event.type):
            if self._streaming is None:
                await self._refuse("no_stream", "synthesize-stop without synthesize-start")
                return True
            self._streaming = None
            with self._session() as (session, now):
                session.end_text(now)
            return True
        if Synthesize.is_type(event.type) and self._streaming is None:
            synthesize = Synthesize.from_event(event)
            text = _text(synthesize.text)  # valid before a turn
            if not await self._start_turn(synthesize.voice, streamed=False):
                return False
            with self._session() as (session, now):
                session.text_delta(text, now)
                session.end_text(now)
        return True  # anything else, a synthesize inside a stream included, is not for us

    async def disconnect(self) -> None:
        """The client is gone (or the server stops): cancel everything the session had running."""
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await self._sender
        if self._driver is not None:
            session = self._driver.session
            self._driver.close()
            self._admission.close_session(session)
            if self._lost:
                self._admission.metrics.sessions_lost.inc()
            logs.event("session_close", session=session.id, protocol="wyoming", lost=self._lost)

    def drain(self) -> None:
        """Server shutdown: finish the current turn, refuse new ones, then close."""
        if self._driver is not None:
            self._driver.session.drain(self._driver.now())
            self._driver.sync()

    async def _start_turn(self, voice: SynthesizeVoice | None, streamed: bool) -> bool:
        """Open the session on the first turn (the capacity check); False if refused."""
        if self._driver is None:
            refusal = self._admission.capacity_refusal()
            if refusal is not None:
                logs.event(
                    "refused", protocol="wyoming", reason=refusal.message, client=self._client
                )
                await self._refuse(refusal.code, refusal.message)
                return False
            config = self._config
            # Wyoming cannot resend refused text: the whole turn may wait in the backlog.
            session = self._admission.open_session(
                replace(config, max_pending_text_chars=config.max_turn_text_chars)
            )
            # Its own worker account, as a WebSocket session's: it has a live listener.
            self._driver = SessionDriver(
                session, self._admission.worker, self._admission.metrics.observe
            )
            self._admission.connections[session.id] = self
            session.start(self._driver.now())
            self._sender = asyncio.create_task(self._send_loop(self._driver))
            logs.event("session_open", session=session.id, client=self._client, protocol="wyoming")
        turn_id = next(self._turn_ids)
        self._turns[turn_id] = _Turn(streamed=streamed)
        self._streaming = turn_id if streamed else None
        with self._session() as (session, now):
            session.update(SettingsUpdate(voice=self._voice(voice)))
            session.turn_reset(turn_id, now)
        return True

    def _voice(self, asked: SynthesizeVoice | None) -> str:
        """The voice asked for by name if the engine has it, else the server's default."""
        voices = self._config.voices
        name = asked.name if asked is not None else None
        return name if name is not None and name in voices else voices[0]

    @contextlib.contextmanager
    def _session(self) -> Iterator[tuple[Session, float]]:
        """The session to call, and now; what the calls asked for is carried out after."""
        assert self._driver is not None
        self._driver.refresh()
        yield self._driver.session, self._driver.now()
        self._driver.sync()

    async def _send_loop(self, driver: SessionDriver) -> None:
        rate = driver.session.audio.sample_rate  # PCM16: the default output format
        while (item := await driver.next_item()) is not None:
            match item:
                case AudioFrame():
                    turn = self._turns.get(item.turn_id)
                    if turn is None:
                        continue
                    if not turn.audio_started:
                        turn.audio_started = True
                        await self.write_event(AudioStart(rate, _WIDTH, 1).event())
                    await self.write_event(AudioChunk(rate, _WIDTH, 1, item.pcm).event())
                case TurnDone():
                    turn = self._turns.pop(item.turn_id, None)
                    if turn is None:
                        continue
                    if not turn.audio_started:
                        await self.write_event(AudioStart(rate, _WIDTH, 1).event())
                    await self.write_event(AudioStop().event())
                    if turn.streamed:
                        await self.write_event(SynthesizeStopped().event())
                    logs.event(
                        "turn_done",
                        session=driver.session.id,
                        turn=item.turn_id,
                        samples=item.samples,
                        cancelled=item.cancelled,
                    )
                case Error():
                    logs.event(
                        "error", session=driver.session.id, turn=item.turn_id, code=item.code
                    )
                    await self.write_event(WyomingError(text=item.message, code=item.code).event())
        await self.stop()  # the session closes (idle timeout, shutdown): so does the connection

    async def _refuse(self, code: str, message: str) -> None:
        await self.write_event(WyomingError(text=message, code=code).event())


def max_event_bytes(config: SessionConfig) -> int:
    """The largest event taken: a one-shot ``synthesize`` carries a whole turn's text, so
    ``max_turn_text_chars`` of UTF-8 (four bytes each at most) besides a message's worth."""
    return config.max_message_bytes + 4 * config.max_turn_text_chars


def _json_object(data: bytes) -> dict[str, Any]:
    text = data.decode()
    if too_deep(text):
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _keepalive(writer: asyncio.StreamWriter, seconds: float) -> None:
    """Find a peer whose host vanished without a reset within about ``seconds``: TCP keepalive
    probes while idle, and a bound on data left unacknowledged (Linux; elsewhere the
    system's keepalive)."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        probe = max(1, int(seconds / 4))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, probe)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, probe)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(seconds * 1000))


def _peer(writer: asyncio.StreamWriter) -> str | None:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else None


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"text must be a string, not {type(value).__name__}")
    return value
