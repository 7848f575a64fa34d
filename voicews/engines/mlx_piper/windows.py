"""Whole windows: each window's waveform in one graph from its frames and their context, batched.

The streaming decoder (``decode.py``) carries every layer's state across windows, which makes
a window thousands of small slices and concatenations: fine on a CPU, where arithmetic is the
cost, but a GPU spends its time dispatching them. Here the flow runs once per sentence (``z``;
run per window, its receptive field of 32 frames each way would be computed again for every
window, and its operations would be half a window's), and HiFi-GAN decodes each window ``[a, b)``
on its own from ``[a - left, b + right)``, its receptive field: every convolution is computed
only where the window's audio needs it (``valid``, no padding), so a window is a few hundred
operations and its audio the one-shot audio up to float rounding, with no crossfade.

Positions outside the sentence are zero in the input and masked to zero before every
convolution that reads a neighbour, as the one-shot decode's zero padding makes them. That
keeps every window's shape a function of its bucket alone, whatever the sentence: windows of
several streams stack on the batch axis, and ``mx.compile`` reuses one graph per shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from ..base import Window
from .layers import FINAL_LRELU_SLOPE, LRELU_SLOPE, Conv, Upsample
from .model import PiperVits
from .weights import VoiceWeights

Act = Callable[[mx.array], mx.array]


def _lrelu(x: mx.array) -> mx.array:
    return mx.maximum(x, LRELU_SLOPE * x)


def _final_lrelu(x: mx.array) -> mx.array:
    return mx.maximum(x, FINAL_LRELU_SLOPE * x)


@dataclass(frozen=True, slots=True)
class _Span:
    """``(batch, n, channels)`` values at positions ``[lo, lo + n)`` of one resolution.

    Positions count from the window's first frame, in the resolution's own units (frames,
    then samples after each upsampling), so they are negative in the left context.
    """

    x: mx.array
    lo: int

    @property
    def hi(self) -> int:
        return self.lo + int(self.x.shape[1])

    def crop(self, lo: int, hi: int) -> _Span:
        if (lo, hi) == (self.lo, self.hi):
            return self
        return _Span(self.x[:, lo - self.lo : hi - self.lo], lo)


def _sum(spans: Sequence[_Span]) -> _Span:
    """The sum where all of ``spans`` are defined."""
    lo, hi = max(s.lo for s in spans), min(s.hi for s in spans)
    total = spans[0].crop(lo, hi).x
    for s in spans[1:]:
        total = total + s.crop(lo, hi).x
    return _Span(total, lo)


class _Masks:
    """Bucketed windows: the input's in-sentence mask at each resolution and width, each
    built once per graph, zeroes what lies outside the sentence before a convolution reads it.

    Without ``valid`` (every window wholly inside its sentence, context included) it masks
    nothing, and a window costs a tenth fewer operations.
    """

    def __init__(self, valid: mx.array | None, left: int) -> None:
        self._valid = valid  # (batch, frames, 1): 1 inside the sentence, 0 outside
        self._left = left
        self._made: dict[tuple[int, int], mx.array] = {}

    def apply(self, x: mx.array, lo: int, unit: int, pads: tuple[int, int]) -> tuple[mx.array, int]:
        """``x`` (its first position ``lo``, ``unit`` samples per frame) zeroed outside."""
        if self._valid is None:
            return x, lo
        key = (unit, int(x.shape[2]))
        mask = self._made.get(key)
        if mask is None:
            v = self._valid
            batch, frames = int(v.shape[0]), int(v.shape[1])
            if unit > 1:
                v = mx.broadcast_to(v[:, :, None], (batch, frames, unit, 1))
                v = v.reshape(batch, frames * unit, 1)
            mask = self._made[key] = mx.broadcast_to(v, (batch, frames * unit, key[1]))
        start = lo + self._left * unit
        return x * mask[:, start : start + int(x.shape[1])], lo


class _Edges:
    """Exact-length windows (one at a time): where a span reaches the sentence's start or
    end, a convolution pads zeros there as the one-shot decode does, so nothing outside the
    sentence is computed. Cheaper on a CPU; each window's shapes its own."""

    def __init__(self, start: int | None, end: int | None) -> None:
        self._start, self._end = start, end  # the sentence's edges in frames, if in the input

    def apply(self, x: mx.array, lo: int, unit: int, pads: tuple[int, int]) -> tuple[mx.array, int]:
        left = pads[0] if self._start is not None and lo == self._start * unit else 0
        hi = lo + int(x.shape[1])
        right = pads[1] if self._end is not None and hi == self._end * unit else 0
        if left or right:
            x = mx.pad(x, [(0, 0), (left, right), (0, 0)])
        return x, lo - left


class _Graph:
    """One window's generator on spans: built once to size the context, then traced."""

    def __init__(self, model: PiperVits, bounds: _Masks | _Edges) -> None:
        self._model, self._bounds = model, bounds

    def conv(self, s: _Span, conv: Conv, unit: int, act: Act | None = None) -> _Span:
        x, lo = s.x if act is None else act(s.x), s.lo
        if conv.span:  # reads its neighbours: outside the sentence they must be the zero padding
            x, lo = self._bounds.apply(x, lo, unit, (conv.pad_left, conv.pad_right))
        return _Span(conv.valid(x), lo + conv.pad_left)

    def upsample(self, s: _Span, up: Upsample, unit: int) -> _Span:
        x, lo = self._bounds.apply(_lrelu(s.x), s.lo, unit, (up.pad_left, up.pad_right))
        return _Span(up.valid(x), (lo + up.pad_left) * up.stride)

    def generator(self, z: _Span) -> _Span:
        gen = self._model.generator
        x, unit = self.conv(z, gen.conv_pre, 1), 1
        for up, blocks in zip(gen.ups, gen.resblocks, strict=True):
            x, unit = self.upsample(x, up, unit), unit * up.stride
            outs = []
            for block in blocks:
                r = x
                for stage in block.stages:
                    y = r
                    for conv in stage:
                        y = self.conv(y, conv, unit, _lrelu)
                    r = _sum([r, y])
                outs.append(r)
            total = _sum(outs)
            x = _Span(total.x * (1.0 / len(blocks)), total.lo)
        y = self.conv(x, gen.conv_post, unit, _final_lrelu)
        return _Span(mx.tanh(y.x), y.lo)


def _receptive_field(model: PiperVits) -> tuple[int, int]:
    """Latent frames of context each side a window needs, from a graph built but never run."""
    probe = 128
    hop = model.hop
    z = mx.zeros((1, 2 * probe + 1, model.channels))
    masks = _Masks(mx.ones((1, 2 * probe + 1, 1)), probe)
    graph = _Graph(model, masks)
    out = graph.generator(_Span(z, -probe))
    left = math.ceil((out.lo + probe * hop) / hop)
    right = math.ceil((probe * hop + hop - out.hi) / hop)
    if left >= probe or right >= probe:
        raise ValueError("receptive field wider than the probe")
    return left, right


def buckets_for(chunk_frames: int, initial_frames: int) -> tuple[int, ...]:
    """Window lengths to pad to: a window plan's sizes, and the largest last window it makes."""
    sizes = {chunk_frames + chunk_frames // 4}
    size = max(1, min(initial_frames, chunk_frames))
    while size < chunk_frames:
        sizes.add(size)
        size *= 2
    sizes.add(chunk_frames)
    return tuple(sorted(sizes))


class WindowDecoder:
    """Decodes ready windows of any streams: ``decode(windows) -> audio``, one per window.

    ``bucketed`` (for a GPU): each window is padded to the smallest bucket that holds it, and
    a batch to a power of two (up to ``max_batch``), so the compiled graphs are one per
    (bucket, batch size) however long the sentences, and windows of one bucket are decoded
    stacked, one evaluation per bucket. Otherwise (for a CPU, where batching gained nothing
    and arithmetic is the cost) each window is decoded at its own length, nothing computed
    outside its sentence, one evaluation each. No host round trip inside a window either way.
    """

    def __init__(
        self,
        model: PiperVits,
        buckets: Sequence[int],
        *,
        max_batch: int = 256,
        bucketed: bool = True,
        compiled: bool = True,
        dtype: mx.Dtype = mx.float32,
    ) -> None:
        if dtype != mx.float32:
            cast = VoiceWeights(
                {k: v.astype(dtype) for k, v in model.weights.arrays.items()},
                model.weights.convs,
            )
            model = PiperVits(cast, matmul=model.matmul)
        self.model = model
        self.hop = model.hop
        self.buckets = tuple(sorted(buckets))
        self.max_batch = max_batch
        self.bucketed = bucketed
        self.dtype = dtype
        self.left, self.right = _receptive_field(model)
        self._masked: Callable[[mx.array, mx.array], mx.array] = self._forward
        self._inner: Callable[[mx.array], mx.array] = self._forward
        if bucketed and compiled:
            self._masked, self._inner = mx.compile(self._forward), mx.compile(self._forward)

    def bucket(self, frames: int) -> int:
        """The window length ``frames`` is padded to (a multiple of the largest past it)."""
        for size in self.buckets:
            if frames <= size:
                return size
        top = self.buckets[-1]
        return -(-frames // top) * top

    def batch_size(self, streams: int) -> int:
        return min(self.max_batch, 1 << max(0, streams - 1).bit_length())

    def _forward(self, z: mx.array, valid: mx.array | None = None) -> mx.array:
        frames = int(z.shape[1]) - self.left - self.right
        graph = _Graph(self.model, _Masks(valid, self.left))
        audio = graph.generator(_Span(z, -self.left))
        return audio.crop(0, frames * self.hop).x[:, :, 0].astype(mx.float32)

    def inputs(
        self, windows: Sequence[Window], frames: int, batch: int
    ) -> tuple[mx.array, mx.array]:
        """The stacked latents with their context, zero outside each sentence, and the mask."""
        length = frames + self.left + self.right
        channels = self.model.channels
        z = np.zeros((batch, length, channels), np.float32)
        valid = np.zeros((batch, length, 1), np.float32)
        for row, w in enumerate(windows):
            total = int(w.z.shape[0])
            lo, hi = max(0, w.start - self.left), min(total, w.start - self.left + length)
            at = lo - (w.start - self.left)
            z[row, at : at + hi - lo] = w.z[lo:hi]
            valid[row, at : at + hi - lo] = 1.0
        return mx.array(z, dtype=self.dtype), mx.array(valid, dtype=self.dtype)

    def inner(self, window: Window) -> bool:
        """Whether the window, padded to its bucket, has all its context inside the sentence."""
        frames = self.bucket(window.end - window.start)
        return window.start >= self.left and (
            window.start + frames + self.right <= window.z.shape[0]
        )

    def _exact(self, w: Window) -> mx.array:
        """One window at its own length, its context cut at the sentence's edges."""
        total = int(w.z.shape[0])
        lo, hi = max(0, w.start - self.left), min(total, w.end + self.right)
        z = mx.array(w.z[None, lo:hi], dtype=self.dtype)
        edges = _Edges(-w.start if lo == 0 else None, total - w.start if hi == total else None)
        graph = _Graph(self.model, edges)
        audio = graph.generator(_Span(z, lo - w.start))
        return audio.crop(0, (w.end - w.start) * self.hop).x[:, :, 0].astype(mx.float32)

    def graph(self, windows: Sequence[Window]) -> mx.array:
        """The lazy audio of windows of one bucket, ``(batch, bucket * hop)``, not evaluated
        (unbucketed: of one window, ``(1, frames * hop)``)."""
        if not self.bucketed:
            (window,) = windows
            return self._exact(window)
        frames = self.bucket(max(w.end - w.start for w in windows))
        z, valid = self.inputs(windows, frames, self.batch_size(len(windows)))
        if all(self.inner(w) for w in windows):
            return self._inner(z)
        return self._masked(z, valid)

    def decode(self, windows: Sequence[Window]) -> list[npt.NDArray[np.float32]]:
        """Each window's audio, in order: one evaluated batch per bucket (and whether masked)
        and ``max_batch`` windows."""
        groups: dict[tuple[int, bool], list[int]] = {}
        for i, w in enumerate(windows):
            key = (self.bucket(w.end - w.start), self.inner(w)) if self.bucketed else (i, True)
            groups.setdefault(key, []).append(i)
        audio: list[Any] = [None] * len(windows)
        for rows in groups.values():
            for first in range(0, len(rows), self.max_batch):
                part = rows[first : first + self.max_batch]
                out = self.graph([windows[i] for i in part])
                mx.eval(out)
                host = np.array(out, copy=False)
                for row, i in enumerate(part):
                    w = windows[i]
                    audio[i] = host[row, : (w.end - w.start) * self.hop].copy()
        return audio

    def warm(self, batches: Sequence[int] = (1,)) -> float:
        """Compiles and runs every bucket at each batch size; returns the seconds it took."""
        import time

        start = time.perf_counter()
        span = self.left + max(self.buckets) + self.right
        z = np.zeros((span, self.model.channels), np.float32)
        for size in self.buckets:
            for batch in batches:  # a window at the sentence's start (masked) and one inside
                self.decode([Window(z, 0, size)] * batch)
                self.decode([Window(z, self.left, self.left + size)] * batch)
        return time.perf_counter() - start
