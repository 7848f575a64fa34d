"""Pipecat text to speech through voicews: ``VoicewsTTSService``, a ``WebsocketTTSService``.

One Pipecat audio context is one voicews turn: the LLM's tokens go out as ``text_delta`` as
they come (token aggregation: voicews cuts its own segments), the end of the reply is
``end_text``, an interruption is ``cancel``, and audio of a turn that is no longer wanted is
dropped by its ``turn_id``. ``words`` events become Pipecat word timestamps, so the
assistant's context keeps only what was spoken. ``pip install 'voicews[pipecat]'``.

>>> tts = VoicewsTTSService(url="ws://127.0.0.1:8765/v1/realtime")
>>> pipeline = Pipeline([..., llm, tts, transport.output(), ...])
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any
from urllib.parse import urlsplit

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, WebsocketTTSService
from pipecat.utils.errors import ErrorCategory
from pipecat.utils.tracing.service_decorators import traced_tts
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from ..errors import ErrorCode
from ..protocol import (
    AudioFrame,
    Cancel,
    ClientMessage,
    EndText,
    Error,
    ServerEvent,
    SessionCreated,
    TextDelta,
    TurnDone,
    TurnReset,
    Words,
    decode_frame,
    encode_event,
    parse_server_event,
)
from . import auth_headers, session_url

_CATEGORIES: dict[str, ErrorCategory] = {
    ErrorCode.RATE_LIMITED: ErrorCategory.RATE_LIMIT,
    ErrorCode.SYNTHESIS_FAILED: ErrorCategory.SERVER,
    ErrorCode.INTERNAL_ERROR: ErrorCategory.SERVER,
}


class TurnQueue:
    """Which audio context is the session's live turn, and what each step sends.

    A session speaks one turn at a time and a ``turn_reset`` cuts the live one, while Pipecat
    opens the next context (a second reply, a ``TTSSpeakFrame``) before the last has finished
    speaking, and plays contexts in order. So a context waits here, its messages held, until
    the live turn is done. Sans-I/O: each step returns the messages to send, in order.
    """

    def __init__(self) -> None:
        self.live: str | None = None
        self._live_ended = False
        self._waiting: dict[str, list[ClientMessage]] = {}
        self._cancelled: set[str] = set()
        self._unanswered_cancels = 0  # cancels that came after their turn had ended

    def text(self, turn_id: str, text: str) -> list[ClientMessage]:
        delta = TextDelta(text=text)
        if turn_id == self.live:
            return [delta]
        if self.live is None:
            self.live, self._live_ended = turn_id, False
            return [TurnReset(turn_id=turn_id), delta]
        self._waiting.setdefault(turn_id, [TurnReset(turn_id=turn_id)]).append(delta)
        return []

    def end(self, turn_id: str) -> list[ClientMessage]:
        """No more text for the turn (idempotent)."""
        if turn_id == self.live:
            if self._live_ended:
                return []
            self._live_ended = True
            return [EndText()]
        waiting = self._waiting.get(turn_id)
        if waiting is not None and not isinstance(waiting[-1], EndText):
            waiting.append(EndText())
        return []

    def drop(self, turn_id: str) -> list[ClientMessage]:
        """Pipecat no longer plays the context (interrupted, or it went quiet and Pipecat
        closed it): cancel it if it is live, forget it if it waits, so the next one goes on."""
        if self._waiting.pop(turn_id, None) is not None or turn_id != self.live:
            return []
        self._cancelled.add(turn_id)
        self.live = None
        return [Cancel(), *self._next()]

    def done(self, turn_id: str, cancelled: bool) -> list[ClientMessage]:
        """The server's ``turn_done``: the next waiting context becomes the live turn."""
        if turn_id in self._cancelled:
            self._cancelled.discard(turn_id)
            if not cancelled:  # it ended by itself before our cancel arrived
                self._unanswered_cancels += 1
        if turn_id != self.live:
            return []
        self.live = None
        return self._next()

    def expected(self, code: str) -> bool:
        """An error our own late cancel caused (the turn had already ended): not news."""
        if code == ErrorCode.NO_ACTIVE_TURN and self._unanswered_cancels:
            self._unanswered_cancels -= 1
            return True
        return False

    def _next(self) -> list[ClientMessage]:
        if not self._waiting:
            return []
        turn_id = next(iter(self._waiting))
        messages = self._waiting.pop(turn_id)
        self.live, self._live_ended = turn_id, isinstance(messages[-1], EndText)
        return messages


class VoicewsTTSService(WebsocketTTSService):
    """Speaks through a voicews server's ``/v1/realtime`` session, with word timestamps.

    Audio comes at the rate the server confirms in ``session_created`` (the pipeline's output
    rate is asked for; the output transport resamples anything else). A dropped socket is
    reconnected by the base class; the turn it carried is lost, as with any provider.
    """

    Settings = TTSSettings
    _settings: TTSSettings

    def __init__(
        self,
        *,
        url: str,
        token: str | None = None,
        text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
        settings: TTSSettings | None = None,
        **kwargs: Any,
    ) -> None:
        # The server speaks with the voice it was started with; nothing here to choose.
        default_settings = TTSSettings(model=None, voice=None, language=None)
        if settings is not None:
            default_settings.apply_update(settings)
        super().__init__(
            # Token by token: voicews cuts its own segments, eagerly for the first audio, so
            # aggregating sentences here would only add a sentence of latency.
            text_aggregation_mode=text_aggregation_mode,
            push_text_frames=False,  # words come back timed, as TTSTextFrames
            push_start_frame=True,
            pause_frame_processing=False,  # audio carries its turn_id
            settings=default_settings,
            **kwargs,
        )
        self._url = url
        self._token = token
        self._turns = TurnQueue()
        self._send_lock = asyncio.Lock()
        self._server_rate: int | None = None
        self._receive_task: asyncio.Task[None] | None = None

    def can_generate_metrics(self) -> bool:
        return True

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        await self._connect()

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The context's text is complete: ``end_text``."""
        flush_id = context_id or self.get_active_audio_context_id()
        if flush_id is not None:
            await self._apply(lambda: self._turns.end(flush_id))

    async def on_turn_context_completed(self) -> None:
        # The base flushes only a context whose audio context is still open; a turn must end
        # on the server even if Pipecat timed its context out, or the next one would wait.
        context_id = self._turn_context_id
        await super().on_turn_context_completed()
        if context_id is not None:
            await self.flush_audio(context_id)

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        await self.stop_all_metrics()
        await self._apply(lambda: self._turns.drop(context_id))
        await super().on_audio_context_interrupted(context_id)

    async def on_audio_context_completed(self, context_id: str) -> None:
        # Pipecat ends a context that went quiet (a stray token after an interruption opens
        # one that no reply ever ends); its turn must not hold the next context back.
        await self._apply(lambda: self._turns.drop(context_id))
        await super().on_audio_context_completed(context_id)

    @traced_tts
    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send the text as a delta of the context's turn; audio comes on the receive task."""
        if self._websocket is None or self._websocket.state is State.CLOSED:
            await self._connect()
        if not await self._apply(lambda: self._turns.text(context_id, text)):
            yield ErrorFrame(error=f"{self}: not connected to voicews; text not spoken")
            return
        await self.start_tts_usage_metrics(text)
        yield None

    # --- connection ---------------------------------------------------------------------

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        if self._websocket is not None and (
            self._receive_task is None or self._receive_task.done()
        ):
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self) -> None:
        await super()._disconnect()
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        if self._websocket is not None and self._websocket.state is State.OPEN:
            return
        # A new session: no turn of the old one lives on in it.
        self._turns, self._server_rate = TurnQueue(), None
        try:
            logger.debug(f"{self}: connecting to voicews at {urlsplit(self._url).netloc}")
            self._websocket = await self._websocket_connect(
                session_url(self._url, self.sample_rate),
                additional_headers=auth_headers(self._token),
            )
            await self._call_event_handler("on_connected")
        except Exception as e:
            self._websocket = None
            await self.push_error(error_msg=f"{self}: cannot connect to voicews: {e}", exception=e)
            await self._call_event_handler("on_connection_error", f"{e}")

    async def _disconnect_websocket(self) -> None:
        try:
            await self.stop_all_metrics()
            if self._websocket is not None:
                await self._websocket.close()
        except Exception as e:
            await self.push_error(error_msg=f"{self}: error closing the connection: {e}")
        finally:
            self._websocket = None
            await self._call_event_handler("on_disconnected")

    async def _apply(self, step: Callable[[], list[ClientMessage]]) -> bool:
        """Take a step of the turn queue and send what it says, in order with every other
        step's messages (the receive task takes steps too); False if the socket is gone."""
        async with self._send_lock:
            websocket = self._websocket
            if websocket is None or websocket.state is not State.OPEN:
                return False
            try:
                for message in step():
                    await websocket.send(encode_event(message))
            except ConnectionClosed as e:
                logger.warning(f"{self}: connection lost while sending: {e}")
                return False
            return True

    # --- what the server sends ----------------------------------------------------------

    async def _receive_messages(self) -> None:
        assert self._websocket is not None
        async for message in self._websocket:
            if isinstance(message, bytes):
                await self._on_audio(decode_frame(message))
            elif (event := parse_server_event(message)) is not None:
                await self._on_event(event)

    async def _on_audio(self, frame: AudioFrame) -> None:
        turn_id = frame.turn_id
        if self.audio_context_available(turn_id):  # else a cut turn's audio: dropped
            rate = self._server_rate or self.sample_rate
            audio = TTSAudioRawFrame(frame.pcm, rate, 1, context_id=turn_id)
            await self.append_to_audio_context(turn_id, audio)

    async def _on_event(self, event: ServerEvent) -> None:
        match event:
            case SessionCreated():
                self._server_rate = event.audio.sample_rate
                if self._server_rate != self.sample_rate:
                    logger.info(
                        f"{self}: voicews speaks at {self._server_rate} Hz, not the pipeline's "
                        f"{self.sample_rate} Hz; the output transport resamples it"
                    )
            case Words() if self.audio_context_available(event.turn_id):
                rate = self._server_rate or self.sample_rate
                await self.add_word_timestamps(
                    [(word.text, word.start_sample / rate) for word in event.words], event.turn_id
                )
            case TurnDone():
                turn_id = event.turn_id
                await self._apply(lambda: self._turns.done(turn_id, event.cancelled))
                if self.audio_context_available(turn_id):
                    await self.append_to_audio_context(turn_id, TTSStoppedFrame(context_id=turn_id))
                    await self.remove_audio_context(turn_id)
            case Error():
                await self._on_error(event)
            case _:
                pass

    async def _on_error(self, error: Error) -> None:
        if self._turns.expected(error.code):
            return
        if error.code == ErrorCode.IDLE_TIMEOUT:
            logger.debug(f"{self}: the idle session was closed; reconnecting")
            return
        await self.push_error(
            error_msg=f"voicews {error.code}: {error.message}",
            category=_CATEGORIES.get(error.code),
        )
