"""The ``mlx-piper`` engine: Piper voices run by MLX, audio streamed window by window.

Construct it on the thread that will call ``synthesize`` (the compute worker does): MLX
streams belong to the thread that created them, and the constructor loads the weights.
Nothing here touches MLX at import time.

Per-server settings are an :class:`MlxConfig`, read from ``VOICEWS_MLX_*`` environment
variables; per-session ones come from ``SynthesisOptions``. Converted weights are cached in
``$VOICEWS_CACHE_DIR`` (``~/.cache/voicews``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from ...audio import Audio
from ..base import Begin, SynthesisOptions, Window, Windows, WordStarts
from ..mlx_device import describe_device, keep_compiled_kernels
from ..piper_words import WordPlacer, inference_chunks, phonemize

if TYPE_CHECKING:
    from .model import PiperVits
    from .windows import WindowDecoder

log = logging.getLogger(__name__)

DECODE_MODES = ("auto", "stream", "overlap", "whole")
DTYPES = ("float32", "float16")
ENV_PREFIX = "VOICEWS_MLX_"


@dataclass(frozen=True, slots=True)
class Sentence:
    """A sentence a stream begins (``Begin.sentence``): its phoneme ids, length scale and
    noise, drawn from the engine's in the order sentences begin, so its audio is the same
    whether its decoder input is made alone or with others'."""

    ids: list[int]
    length_scale: float
    rng: np.random.Generator


DecoderInput = tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]
"""A sentence's flow output (``(frames, channels)``, on the host) and frames per phoneme id."""


@dataclass(frozen=True, slots=True)
class MlxConfig:
    """Server-wide settings; each field is read from ``VOICEWS_MLX_<FIELD>`` by :meth:`from_env`."""

    chunk_frames: int = 64
    """Latent frames per window once ramped up. Measured with python -m bench mlx_chunked (9 s
    sentence, MLX CPU): streaming costs 10-20% more compute than the one-shot decode at 64
    frames, 25-45% at 16-32; 128 saves a few percent more but holds the compute worker (which
    switches jobs between windows) twice as long."""
    initial_chunk_frames: int = 8
    """The first window's frames; windows double from it. Measured: the first window, with the
    lookahead the layers after it need, then costs a fraction of the encoder's time, so compute
    before first audio is about a tenth of the whole segment's; 4 gains nothing measurable, 16
    costs more. That is the CPU's streaming decoder: bucketed whole windows (a GPU's) start at
    ``chunk_frames``, since there a window costs its dispatch, not its frames (about 200
    operations whatever its length): "Hello there." is then one window, 3,065 operations per
    second of audio against 3,948 with the ramp (python -m bench mlx_ops, before the encoder's
    and the duration predictor's cuts), and every window
    but a sentence's last is in one bucket, so sessions' windows batch together and the
    warm-up compiles two buckets, not five."""
    decode: str = "auto"
    """``auto`` (``whole`` where MLX's default device is a GPU, else ``stream``), ``stream``
    (exact, state carried across windows: each position computed once), ``whole`` (the flow
    over the sentence, then each window alone from its receptive field, exact to float
    rounding, ~200 operations a window against the stream's ~8,600, batched across sessions:
    the GPU's; see ``windows.py``) or ``overlap`` (windows decoded alone with less context,
    crossfaded). A session that sets ``overlap_frames`` asks for overlap. Measured on MLX's
    CPU backend (python -m bench mlx_ops --time 3, 2 busy cores): ``whole`` took 10% less CPU than
    ``stream``, but its first audio on a 8.4 s sentence came after 2.9 s against 1.2 s (the
    flow over the whole sentence first), so a CPU keeps ``stream``."""
    overlap_frames: int = 24
    """Context frames for ``overlap`` decoding: the flow sees 32 frames each way, and measured
    SNR against the one-shot decode was 64-103 dB with 24 frames of context, but only 24-44 dB
    with 16 and 20-34 with 12 (three sentences, 32-frame windows)."""
    dtype: str = "float32"
    """``float16`` runs the ``whole`` decoder in half precision: 43.6 dB SNR from float32 on an
    H200 (issue 33); bfloat16 was only 25.6 dB, so it is not offered."""
    compile: str = "auto"
    """``on``: the ``whole`` decoder pads windows to buckets, stacks them and runs them
    through ``mx.compile`` (one graph per bucket and batch size: for a GPU); ``off``: each
    window at its own length, nothing computed outside the sentence (for a CPU); ``auto``:
    ``on`` where MLX's default device is a GPU."""
    device: str = ""
    """``cpu`` or ``gpu`` (any case) to override MLX's default device."""
    max_batch: int = 64
    """With ``whole`` decoding the compute worker decodes the ready windows of all sessions
    together, at most this many in one step (issue 33's first milestone: 64 conversations;
    per stream-window on an H200, uncompiled: 4.6 ms alone, 0.20 ms in a batch of 64)."""
    batch_wait_ms: int = 3
    """Milliseconds the most urgent ready window waits for others to join its batch (a
    64-frame window is 743 ms of audio: a few ms of waiting is cheap, a batch of one is not)."""

    def __post_init__(self) -> None:
        minimums = {
            "chunk_frames": 1,
            "initial_chunk_frames": 1,
            "overlap_frames": 0,
            "max_batch": 1,
            "batch_wait_ms": 0,
        }
        for name, minimum in minimums.items():
            if getattr(self, name) < minimum:
                raise ValueError(f"{ENV_PREFIX}{name.upper()} must be at least {minimum}")
        if self.decode not in DECODE_MODES:
            raise ValueError(f"{ENV_PREFIX}DECODE must be one of {DECODE_MODES}")
        if self.compile not in ("auto", "on", "off"):
            raise ValueError(f"{ENV_PREFIX}COMPILE must be auto, on or off")
        if self.dtype not in DTYPES:
            raise ValueError(f"{ENV_PREFIX}DTYPE must be one of {DTYPES}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> MlxConfig:
        """The defaults, but for each ``VOICEWS_MLX_<FIELD>`` that is set and not empty."""
        values: dict[str, Any] = {}
        for setting in fields(cls):
            raw = env.get(ENV_PREFIX + setting.name.upper())
            if raw:
                values[setting.name] = int(raw) if setting.type == "int" else raw
        return cls(**values)


class MlxPiperEngine:
    """One Piper voice (``.onnx`` with its ``.onnx.json``) on MLX's default device."""

    name = "mlx-piper"
    concurrent = False  # MLX streams belong to the thread that made them

    def __init__(
        self,
        voice: str | Path | None = None,
        *,
        cache_dir: Path | None = None,
        seed: int | None = None,
        config: MlxConfig | None = None,
    ) -> None:
        keep_compiled_kernels(cache_dir)
        import mlx.core as mx
        from piper import PiperVoice
        from piper.config import PiperConfig

        from ..piper import bundled_voice
        from .model import PiperVits
        from .weights import load_voice_weights

        self.config = config or MlxConfig.from_env()
        model = Path(voice) if voice else bundled_voice()
        config_path = model.with_name(model.name + ".json")
        if not model.is_file() or not config_path.is_file():
            raise FileNotFoundError(f"Piper voice needs {model} and {config_path}")
        voice_config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        if voice_config.num_speakers > 1:
            raise NotImplementedError(f"{model.name}: multi-speaker voices are not supported")
        device = self.config.device.lower()
        if device in ("cpu", "gpu"):
            mx.set_default_device(mx.cpu if device == "cpu" else mx.gpu)
        # Only piper-tts's phonemizer is used: no onnxruntime session is created.
        self._phonemizer = PiperVoice(session=None, config=voice_config)
        self._words = WordPlacer(self._phonemizer)
        self._hop = int(voice_config.hop_length)
        self._noise_scale = float(voice_config.noise_scale)
        self._noise_w = float(voice_config.noise_w_scale)
        self._length_scale = float(voice_config.length_scale)
        self.sample_rate: int = voice_config.sample_rate
        self.model: PiperVits = PiperVits(load_voice_weights(model, cache_dir))
        self.device = describe_device()
        self._rng = np.random.default_rng(seed)
        self._windows: WindowDecoder | None = None
        self.decode = self.config.decode
        """The decoder in use: ``auto`` resolved for the device."""
        if self.decode == "auto":
            self.decode = "stream" if self.device == "cpu" else "whole"
        self.batched = self.decode == "whole"
        """The compute worker gathers every session's ready windows into one decoder step
        (``WindowedEngine``); the streaming decoder carries state per stream, so it cannot."""
        self.max_batch = self.config.max_batch
        self.batch_wait = self.config.batch_wait_ms / 1000
        log.info("mlx-piper: %s on %s", model.name, self.device)

    @property
    def windows(self) -> WindowDecoder:
        """The ``whole`` decoder, built on first use (it sizes its receptive field then)."""
        if self._windows is None:
            import mlx.core as mx

            from .windows import WindowDecoder, buckets_for

            config = self.config
            on = config.compile == "on" or (config.compile == "auto" and self.device != "cpu")
            self._windows = WindowDecoder(
                self.model,
                buckets_for(
                    config.chunk_frames, config.chunk_frames if on else config.initial_chunk_frames
                ),
                max_batch=config.max_batch,
                bucketed=on,
                compiled=on,
                dtype=mx.float16 if config.dtype == "float16" else mx.float32,
            )
        return self._windows

    def phoneme_ids(self, text: str, speed: float = 1.0) -> list[list[int]]:
        """Piper's phoneme ids for each inference of ``text``: per sentence, exactly as
        piper-tts makes them, with a long sentence split as the other engine splits it."""
        return [ids for _, ids in self._sentences(text, speed)]

    def _sentences(self, text: str, speed: float) -> list[tuple[list[str], list[int]]]:
        sentences = [p for p in phonemize(self._phonemizer, text) if p]
        return [
            (phonemes, self._phonemizer.phonemes_to_ids(phonemes))
            for phonemes in inference_chunks(sentences, speed)
        ]

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        from .decode import overlap_windows, streaming_windows

        config = self.config
        overlap = options.overlap_frames
        if overlap is None and config.decode == "overlap":
            overlap = config.overlap_frames
        timed = []
        for phonemes, ids in self._sentences(text, options.speed):
            latents = self._latents(ids, options.speed)
            plan = self._plan(int(latents.z_p.shape[0]), options)
            if overlap is not None:
                windows: Iterator[Any] = overlap_windows(self.model, latents.z_p, plan, overlap)
            elif self.decode == "whole":
                windows = self._whole(latents.z_p, plan)
            else:
                windows = streaming_windows(self.model, latents.z_p, plan)
            for audio in windows:
                yield np.array(audio, dtype=np.float32)
            timed.append((phonemes, latents.durations * self._hop))
        placed = self._words.place(text, timed) if timed else None
        if placed is not None:
            yield placed

    def _latents(self, ids: list[int], speed: float) -> Any:
        return self._sentence_latents(self._sentence(ids, speed))

    def _sentence(self, ids: list[int], speed: float) -> Sentence:
        return Sentence(ids, self._length_scale / speed, self._sentence_rng())

    def _sentence_latents(self, sentence: Sentence) -> Any:
        return self.model.latents(
            sentence.ids,
            noise_scale=self._noise_scale,
            length_scale=sentence.length_scale,
            noise_w=self._noise_w,
            rng=sentence.rng,
        )

    def _sentence_rng(self) -> np.random.Generator:
        """A sentence's own noise, seeded from the engine's in the order sentences start:
        the same whether its latents run alone or beside others' (:meth:`begin`)."""
        return np.random.default_rng(int(self._rng.integers(1 << 63)))

    def _plan(self, frames: int, options: SynthesisOptions) -> list[tuple[int, int]]:
        from .decode import window_plan

        chunk = options.chunk_frames or self.config.chunk_frames
        first = min(self.config.initial_chunk_frames, chunk)
        if self.decode == "whole" and self.windows.bucketed:
            first = chunk  # see initial_chunk_frames
        return window_plan(frames, chunk, first)

    def _whole(self, z_p: Any, plan: list[tuple[int, int]]) -> Iterator[Any]:
        z = self._decoder_input(z_p)
        for start, end in plan:
            (audio,) = self.windows.decode([Window(z, start, end)])
            yield audio

    def _decoder_input(self, z_p: Any) -> npt.NDArray[np.float32]:
        """The flow's output for a whole sentence, on the host: the windows' input."""
        import mlx.core as mx

        z = self.model.flow.reverse(z_p)
        mx.eval(z)
        return np.array(z, dtype=np.float32)

    def begin(self, sentences: Sequence[object]) -> list[DecoderInput]:
        """The decoder inputs of sentences that streams begin together (:meth:`windows_of`'s
        ``Begin`` items): their encoders, durations and flows in one batch, padded to the
        longest and masked (:meth:`PiperVits.decoder_inputs`), two evaluations however many."""
        begun = [cast(Sentence, sentence) for sentence in sentences]
        return self.model.decoder_inputs(
            [sentence.ids for sentence in begun],
            noise_scale=self._noise_scale,
            length_scales=[sentence.length_scale for sentence in begun],
            noise_w=self._noise_w,
            rngs=[sentence.rng for sentence in begun],
        )

    def windows_of(self, text: str, options: SynthesisOptions) -> Windows:
        """``text``'s windows in order, its word starts just before the last (that window
        ends the synthesis): for a caller that decodes several streams' windows at once
        (:meth:`decode_windows`). Each sentence is announced by a ``Begin`` before its first
        window: the caller sends back its decoder input, made with other streams' sentences
        (:meth:`begin`), or None, and the sentence's encoder, durations and flow run alone. A
        session that asks for ``overlap`` windows gets its audio as ``synthesize`` makes it."""
        if options.overlap_frames is not None:
            yield from self.synthesize(text, options)
            return
        timed = []
        sentences = self._sentences(text, options.speed)
        for i, (phonemes, ids) in enumerate(sentences):
            sentence = self._sentence(ids, options.speed)
            made = yield Begin(sentence)
            if made is None:
                latents = self._sentence_latents(sentence)
                z, durations = self._decoder_input(latents.z_p), latents.durations
            else:
                z, durations = cast(DecoderInput, made)
            timed.append((phonemes, durations * self._hop))
            plan = self._plan(int(z.shape[0]), options)
            for k, (start, end) in enumerate(plan):
                last = i == len(sentences) - 1 and k == len(plan) - 1
                if last and (placed := self._words.place(text, timed)) is not None:
                    yield placed
                yield Window(z, start, end)

    def window_bucket(self, frames: int) -> int:
        """The length a window is padded to (its own length where windows are not bucketed)."""
        return self.windows.bucket(frames) if self.windows.bucketed else frames

    def decode_windows(self, windows: Sequence[Window]) -> list[Audio]:
        """The audio of ready windows of any streams, decoded together: stacked on the batch
        axis per window bucket, one evaluation per bucket. Equal to decoding each alone."""
        return self.windows.decode(windows)

    def warm(self) -> float:
        """Compiles and runs the shapes synthesis will use (one sentence through the encoder,
        and two together where sessions are batched; with ``whole`` decoding each window
        bucket at each batch size the worker's batches are padded to); returns the seconds it
        took. Before this, a fresh process's first window pays the kernel compilation (10-14 s
        on MLX CUDA). The seeded noise is left as it was."""
        import time

        start = time.perf_counter()
        rng, self._rng = self._rng, np.random.default_rng(0)
        try:
            for _ in self.synthesize("Warming up.", SynthesisOptions()):
                pass
            if self.batched:  # sessions beginning together: their encoders in one batch
                ids = self.phoneme_ids("Warming up.")[0]
                self.begin([self._sentence(ids, 1.0), self._sentence(ids, 1.0)])
            if self.decode == "whole":
                windows = self.windows
                top = windows.batch_size(self.max_batch) if windows.bucketed else 1
                windows.warm(tuple(1 << k for k in range(top.bit_length())))
        finally:
            self._rng = rng
        return time.perf_counter() - start
