"""Chunked decoding of one sentence's latents, so audio leaves before the whole waveform exists.

Once the encoder and durations have given a sentence's latent frames, the flow and HiFi-GAN
turn them into audio. Both are stacks of non-causal convolutions: one output sample depends
on about 32 latent frames either side through the flow and 11 through the generator. Two ways
to decode in windows of latent frames:

``StreamingDecoder`` (the default) carries every convolution's state from one window to the
next. Each layer is a node that computes the positions asked of it, keeps what it computed,
and reads its inputs' kept values instead of recomputing them, so each position of each layer
is computed exactly once and the streamed waveform is the one-shot waveform. The first window
computes each layer a little ahead (the lookahead the layers after it need), and later windows
reuse that.

``overlap_windows`` decodes each window on its own with ``overlap`` frames of context either
side and crossfades the overlapping audio: simpler, but the context is computed again for
every window and the joins are only approximately the one-shot waveform.

Windows ramp up (``window_plan``): a small first window so first audio comes early, then
doubling up to ``chunk_frames`` so later windows amortize their per-window overhead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial

import mlx.core as mx

from .flow import Flow, gated
from .generator import Generator
from .layers import FINAL_LRELU_SLOPE, LRELU_SLOPE, Conv, Upsample, leaky_relu, pad_time
from .model import PiperVits

Window = tuple[int, int]
Act = Callable[[mx.array], mx.array]


def window_plan(frames: int, chunk_frames: int, initial_frames: int) -> list[Window]:
    """Frame ranges ``[start, end)``: ``initial_frames`` first, doubling up to ``chunk_frames``.

    A remainder of at most a quarter of a window joins the window before it rather than
    costing a window of its own.
    """
    chunk_frames = max(1, chunk_frames)
    size = max(1, min(initial_frames, chunk_frames))
    plan: list[Window] = []
    start = 0
    while start < frames:
        end = min(frames, start + size)
        if frames - end <= size // 4:
            end = frames
        plan.append((start, end))
        start = end
        size = min(chunk_frames, size * 2)
    return plan


# --- the stateful streaming decoder -------------------------------------------------------


class _Node:
    """A signal over positions ``[0, length)``, computed on request and kept for later windows.

    The kept range starts at the lowest position requested during the current window
    (``release`` drops what lies before it): the next window asks for positions at or after
    those, so nothing is computed twice. A request outside what is kept is still answered
    correctly, by computing it again.
    """

    def __init__(self, length: int, channels: int) -> None:
        self.length = length
        self.channels = channels
        self.computed = 0
        """Positions computed so far: ``length`` at the end when nothing was computed twice."""
        self._lo = 0
        self._data: mx.array | None = None
        self._low_water: int | None = None

    def _compute(self, start: int, end: int) -> mx.array:
        raise NotImplementedError

    def _run(self, start: int, end: int) -> mx.array:
        self.computed += end - start
        return self._compute(start, end)

    def get(self, start: int, end: int) -> mx.array:
        """Values for positions ``[start, end)``, inside ``[0, length)``."""
        self._low_water = start if self._low_water is None else min(self._low_water, start)
        data, lo = self._data, self._lo
        if data is None or start > lo + data.shape[0] or end < lo:
            data, lo = self._run(start, end), start
        else:
            if start < lo:
                data = mx.concatenate([self._run(start, lo), data])
                lo = start
            hi = lo + data.shape[0]
            if end > hi:
                data = mx.concatenate([data, self._run(hi, end)])
        self._data, self._lo = data, lo
        return data[start - lo : end - lo]

    def padded(self, start: int, end: int, act: Act | None = None) -> mx.array:
        """``get`` with zeros outside ``[0, length)``, as the one-shot convolutions pad."""
        lo, hi = max(start, 0), min(end, self.length)
        if hi <= lo:
            return mx.zeros((end - start, self.channels))
        x = self.get(lo, hi)
        if act is not None:
            x = act(x)
        return pad_time(x, lo - start, end - hi)

    def release(self) -> None:
        """End of a window: forget what lies before this window's lowest request."""
        if self._data is not None and self._low_water is not None and self._low_water > self._lo:
            self._data = self._data[self._low_water - self._lo :]
            self._lo = self._low_water
        self._low_water = None

    def kept(self) -> mx.array | None:
        return self._data


class _Source(_Node):
    def __init__(self, values: mx.array) -> None:
        super().__init__(values.shape[0], values.shape[1])
        self._values = values

    def get(self, start: int, end: int) -> mx.array:
        return self._values[start:end]


class _ConvNode(_Node):
    def __init__(
        self,
        src: _Node,
        conv: Conv,
        act: Act | None = None,
        post: Act | None = None,
        channels: int | None = None,
    ) -> None:
        super().__init__(src.length, channels or conv.out_channels)
        self._src, self._conv, self._act, self._post = src, conv, act, post

    def _compute(self, start: int, end: int) -> mx.array:
        conv = self._conv
        x = self._src.padded(start - conv.pad_left, end + conv.pad_right, self._act)
        y = conv.valid(x)
        return y if self._post is None else self._post(y)


class _UpNode(_Node):
    def __init__(self, src: _Node, up: Upsample, act: Act) -> None:
        super().__init__(src.length * up.stride, up.out_channels)
        self._src, self._up, self._act = src, up, act

    def _compute(self, start: int, end: int) -> mx.array:
        s = self._up.stride
        q0, q1 = start // s, -(-end // s)
        x = self._src.padded(q0 - self._up.pad_left, q1 + self._up.pad_right, self._act)
        return self._up.valid(x)[start - q0 * s : end - q0 * s]


class _MapNode(_Node):
    def __init__(self, fn: Callable[..., mx.array], *srcs: _Node, channels: int) -> None:
        super().__init__(srcs[0].length, channels)
        self._fn, self._srcs = fn, srcs

    def _compute(self, start: int, end: int) -> mx.array:
        return self._fn(*(s.get(start, end) for s in self._srcs))


def _flip(x: mx.array) -> mx.array:
    return x[:, ::-1]


def _add(*xs: mx.array) -> mx.array:
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def _mean(*xs: mx.array, scale: float) -> mx.array:
    return _add(*xs) * scale


def _first(x: mx.array, n: int) -> mx.array:
    return x[:, :n]


def _rest(x: mx.array, n: int) -> mx.array:
    return x[:, n:]


def _residual(h: mx.array, res_skip: mx.array, n: int) -> mx.array:
    return h + res_skip[:, :n]


def _couple(z: mx.array, mean: mx.array, n: int) -> mx.array:
    """A mean-only coupling in reverse: the second half loses the mean the first predicts."""
    return mx.concatenate([z[:, :n], z[:, n:] - mean], axis=1)


class _Graph:
    """The flow and generator as nodes; ``nodes`` lists them all for releasing and checks."""

    def __init__(self, model: PiperVits, z_p: mx.array) -> None:
        self.nodes: list[_Node] = []
        source = _Source(z_p)
        self.output = self._generator(model.generator, self._flow(model.flow, source))

    def _add_node(self, node: _Node) -> _Node:
        self.nodes.append(node)
        return node

    def _flow(self, flow: Flow, z: _Node) -> _Node:
        channels = z.channels
        for cp in flow.couplings:
            half, hidden = cp.half, cp.hidden
            flipped = self._add_node(_MapNode(_flip, z, channels=channels))
            x0 = self._add_node(_MapNode(partial(_first, n=half), flipped, channels=half))
            h = self._add_node(_ConvNode(x0, cp.pre))
            skips: list[_Node] = []
            last = len(cp.in_layers) - 1
            for i, (conv_in, conv_rs) in enumerate(zip(cp.in_layers, cp.res_skip, strict=True)):
                acts = self._add_node(
                    _ConvNode(h, conv_in, post=partial(gated, hidden=hidden), channels=hidden)
                )
                rs = self._add_node(_ConvNode(acts, conv_rs))
                if i == last:
                    skips.append(rs)
                    break
                skips.append(
                    self._add_node(_MapNode(partial(_rest, n=hidden), rs, channels=hidden))
                )
                h = self._add_node(_MapNode(partial(_residual, n=hidden), h, rs, channels=hidden))
            out = self._add_node(_MapNode(_add, *skips, channels=hidden))
            m = self._add_node(_ConvNode(out, cp.post))
            z = self._add_node(_MapNode(partial(_couple, n=half), flipped, m, channels=channels))
        return z

    def _generator(self, gen: Generator, z: _Node) -> _Node:
        act = partial(leaky_relu, slope=LRELU_SLOPE)
        x = self._add_node(_ConvNode(z, gen.conv_pre))
        for up, blocks in zip(gen.ups, gen.resblocks, strict=True):
            x = self._add_node(_UpNode(x, up, act))
            outs: list[_Node] = []
            for block in blocks:
                r = x
                for stage in block.stages:
                    y = r
                    for conv in stage:
                        y = self._add_node(_ConvNode(y, conv, act))
                    r = self._add_node(_MapNode(_add, r, y, channels=r.channels))
                outs.append(r)
            mean = partial(_mean, scale=1.0 / len(blocks))
            x = self._add_node(_MapNode(mean, *outs, channels=x.channels))
        final = partial(leaky_relu, slope=FINAL_LRELU_SLOPE)
        return self._add_node(_ConvNode(x, gen.conv_post, final, mx.tanh))


class StreamingDecoder:
    """One sentence's flow + generator, decoded window by window with state carried across.

    ``window(start, end)`` returns exactly the one-shot audio of frames ``[start, end)``;
    windows must come in order and adjacent.
    """

    def __init__(self, model: PiperVits, z_p: mx.array) -> None:
        self.hop = model.hop
        self.frames = int(z_p.shape[0])
        self._graph = _Graph(model, z_p)

    @property
    def nodes(self) -> list[_Node]:
        return self._graph.nodes

    def window(self, start: int, end: int) -> mx.array:
        audio = self._graph.output.get(start * self.hop, end * self.hop)[:, 0]
        kept = [d for n in self._graph.nodes if (d := n.kept()) is not None]
        mx.eval(audio, *kept)
        for node in self._graph.nodes:
            node.release()
        return audio


def streaming_windows(model: PiperVits, z_p: mx.array, plan: list[Window]) -> Iterator[mx.array]:
    """Exact audio per window of ``plan``, each evaluated before it is yielded."""
    decoder = StreamingDecoder(model, z_p)
    for start, end in plan:
        yield decoder.window(start, end)


# --- the overlap-crossfade decoder --------------------------------------------------------


def overlap_windows(
    model: PiperVits,
    z_p: mx.array,
    plan: list[Window],
    overlap: int,
    crossfade: int | None = None,
) -> Iterator[mx.array]:
    """Each window decoded alone with ``overlap`` frames of context each side; joins crossfaded.

    Window ``k`` decodes frames ``[a - overlap, b + overlap)``; its join with the window
    before it is a raised-cosine crossfade of ``crossfade`` frames centred on frame ``a``
    (default: a third of the overlap, at most 8 frames and the shortest window), so both
    sides keep most of their context there. Overlap 0 is a hard cut.
    """
    frames, hop = int(z_p.shape[0]), model.hop
    if crossfade is None:
        crossfade = min(8, max(1, overlap // 3)) if overlap > 0 else 0
    shortest = min((end - start for start, end in plan), default=0)
    half = min(crossfade, shortest) * hop // 2
    fade_in = 0.5 - 0.5 * mx.cos(math.pi * (mx.arange(2 * half) + 0.5) / max(1, 2 * half))
    tail: mx.array | None = None
    for k, (start, end) in enumerate(plan):
        lo, hi = max(0, start - overlap), min(frames, end + overlap)
        audio = model.decode(z_p[lo:hi])
        first = 0 if k == 0 else start * hop - half
        last = frames * hop if k == len(plan) - 1 else end * hop - half
        piece = audio[first - lo * hop : last - lo * hop]
        if tail is not None and half:
            mixed = tail * (1.0 - fade_in) + piece[: 2 * half] * fade_in
            piece = mx.concatenate([mixed, piece[2 * half :]])
        if k < len(plan) - 1:
            tail = audio[last - lo * hop : end * hop + half - lo * hop]
            mx.eval(piece, tail)
        else:
            mx.eval(piece)
        yield piece
