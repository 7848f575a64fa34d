"""LiveKit Agents text to speech through voicews: ``TTS``, streaming, with aligned transcripts.

Each ``stream()`` is one voicews turn on a pooled session: pushed text goes out as
``text_delta`` as it comes (voicews cuts its own segments), the end of input is ``end_text``,
audio goes through the emitter with each word's start as a timed transcript, and ``aclose()``
before the end cancels the turn on the server. ``pip install 'voicews[livekit]'``.

>>> session = AgentSession(stt=..., llm=..., tts=TTS(url="ws://127.0.0.1:8765/v1/realtime"))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator

from livekit.agents import APIConnectionError, APIError, APITimeoutError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions, TimedString

from ..client import RealtimeClient
from ..protocol import AudioFrame, Error, TurnDone, Words
from . import auth_headers, session_url

log = logging.getLogger(__name__)

SAMPLE_RATE = 22050
"""The bundled voice's rate, asked for by default."""
_MAX_IDLE_S = 240.0
"""Pooled sessions are replaced before the server's idle timeout (300 s by default) ends them."""


class TTS(tts.TTS[None]):
    """Speaks through a voicews server's ``/v1/realtime`` endpoint.

    ``sample_rate`` is asked of the server; frames carry the rate it confirms in
    ``session_created`` (LiveKit resamples frames to its output by their own rate).
    """

    def __init__(
        self, *, url: str, token: str | None = None, sample_rate: int = SAMPLE_RATE
    ) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=sample_rate,
            num_channels=1,
        )
        self._url = url
        self._token = token
        self._pool = utils.ConnectionPool[RealtimeClient](
            connect_cb=self._connect,
            close_cb=self._close,
            max_session_duration=_MAX_IDLE_S,
            mark_refreshed_on_get=True,
        )
        self._streams = weakref.WeakSet[SynthesizeStream]()
        self._rate_noted = False

    @property
    def model(self) -> str:
        return "voicews"

    @property
    def provider(self) -> str:
        return "voicews"

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> ChunkedStream:
        return ChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(
        self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> SynthesizeStream:
        stream = SynthesizeStream(tts=self, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    def prewarm(self) -> None:
        self._pool.prewarm()

    async def aclose(self) -> None:
        for stream in list(self._streams):
            await stream.aclose()
        self._streams.clear()
        await self._pool.aclose()

    async def _connect(self, timeout: float) -> RealtimeClient:
        url = session_url(self._url, self.sample_rate)
        client = await asyncio.wait_for(
            RealtimeClient.connect(url, additional_headers=auth_headers(self._token)), timeout
        )
        if client.sample_rate != self.sample_rate and not self._rate_noted:
            self._rate_noted = True
            log.info("voicews speaks at %d Hz, not %d Hz", client.sample_rate, self.sample_rate)
        return client

    async def _close(self, client: RealtimeClient) -> None:
        await client.ws.close()


class ChunkedStream(tts.ChunkedStream):
    """``synthesize()``: the whole text as one turn."""

    def __init__(self, *, tts: TTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._tts: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        async def text() -> AsyncIterator[str]:
            yield self._input_text

        await _speak(self._tts, output_emitter, text(), self._conn_options, stream=False)


class SynthesizeStream(tts.SynthesizeStream):
    """``stream()``: one turn whose text is pushed as it is generated."""

    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        await _speak(self._tts, output_emitter, self._text(), self._conn_options, stream=True)

    async def _text(self) -> AsyncIterator[str]:
        """Pushed text up to the first flush after some text (one segment per stream)."""
        seen = False
        async for data in self._input_ch:
            if isinstance(data, str):
                seen = True
                if not data:
                    continue
                self._mark_started()
                yield data
            elif seen:
                return


async def _speak(
    tts: TTS,
    emitter: tts.AudioEmitter,
    texts: AsyncIterator[str],
    conn_options: APIConnectOptions,
    stream: bool,
) -> None:
    """One turn on a pooled session: the texts as deltas; audio and word starts into the
    emitter. A turn left before its ``turn_done`` is cancelled and its session closed."""
    turn_id = utils.shortuuid()
    first = await anext(texts, None)  # no session is taken for a stream that never speaks
    if first is None:
        emitter.initialize(
            request_id=turn_id, sample_rate=tts.sample_rate, num_channels=1, mime_type="audio/pcm"
        )
        return
    try:
        async with tts._pool.connection(timeout=conn_options.timeout) as client:
            emitter.initialize(
                request_id=turn_id,
                sample_rate=client.sample_rate,
                num_channels=1,
                mime_type="audio/pcm",
                stream=stream,
            )
            if stream:
                emitter.start_segment(segment_id=turn_id)
            await client.turn_reset(turn_id)
            await client.text_delta(first)
            sender = asyncio.create_task(_send_rest(client, texts))
            receiver = asyncio.create_task(_receive(client, turn_id, emitter))
            completed = False
            try:
                await asyncio.gather(sender, receiver)
                completed = True
            finally:
                await utils.aio.gracefully_cancel(sender, receiver)
                if not completed:  # closed early or failed: stop the turn on the server
                    with contextlib.suppress(Exception):
                        await client.cancel()
                        await client.ws.close()
            if stream:
                emitter.end_segment()
    except TimeoutError:
        raise APITimeoutError() from None
    except APIError:
        raise
    except Exception as e:
        raise APIConnectionError(f"voicews: {e}") from e


async def _send_rest(client: RealtimeClient, texts: AsyncIterator[str]) -> None:
    async for text in texts:
        await client.text_delta(text)
    await client.end_text()


async def _receive(client: RealtimeClient, turn_id: str, emitter: tts.AudioEmitter) -> None:
    """Until the turn's ``turn_done``; errors about it fail the stream (so a fallback can
    take over), after the audio that did come. No read timeout: the text may pause for as
    long as the LLM does, and the WebSocket's keepalive finds a dead server."""
    rate = client.sample_rate
    errors: list[Error] = []
    while True:
        item = await client.recv()
        match item:
            case AudioFrame() if item.turn_id == turn_id:
                emitter.push(item.pcm)
            case Words() if item.turn_id == turn_id:
                emitter.push_timed_transcript(
                    [
                        TimedString(f"{w.text} ", start_time=w.start_sample / rate)
                        for w in item.words
                    ]
                )
            case Error() if item.turn_id in (turn_id, None):
                errors.append(item)
            case TurnDone() if item.turn_id == turn_id:
                if errors or item.cancelled:
                    detail = "; ".join(f"{e.code}: {e.message}" for e in errors) or "turn cut"
                    raise APIError(f"voicews: {detail}", retryable=False)
                return
