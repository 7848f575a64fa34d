"""The building blocks Kokoro's MLX components share: convolutions, norms (plain and
conditioned on the style vector), linear layers, the bidirectional LSTM, StyleTTS 2's residual
block. ``(time, channels)`` layout, one utterance at a time; the decoder's layers also take
``(1, time, channels)``, which MLX's convolutions read as is (no reshape in and out a call)."""

from __future__ import annotations

import math
from functools import lru_cache

import mlx.core as mx
import numpy as np

from ..mlx_piper.layers import Conv, leaky_relu, pad_time

Weights = dict[str, mx.array]


class SameConv(Conv):
    """A stride-1 convolution with 'same' padding: where MLX's ``conv1d`` computes it (a GPU),
    the padding is the convolution's own, not one more operation a call. On a batched
    ``(1, T, C)`` input a 1-tap one is a ``conv1d`` too: a matmul would reshape it in and out."""

    groups = 1
    """MLX's grouped convolution where it runs natively (``grouped_same_conv``)."""

    def __init__(
        self, weight: mx.array, bias: mx.array | None, *, matmul: bool, dilation: int = 1
    ) -> None:
        pad = dilation * (int(weight.shape[1]) - 1) // 2  # every one of Kokoro's is odd
        super().__init__(
            weight, bias, dilation=dilation, pad_left=pad, pad_right=pad, matmul=matmul
        )
        self._matmul = matmul

    def __call__(self, x: mx.array) -> mx.array:
        if self._matmul or not (self._native or x.ndim == 3):
            return super().__call__(x)
        y = mx.conv1d(
            x if x.ndim == 3 else x.reshape(1, *x.shape),
            self._weight,
            padding=self.pad_left,
            dilation=self.dilation,
            groups=self.groups,
        )
        y = y if x.ndim == 3 else y.reshape(y.shape[1:])
        return y if self._bias is None else y + self._bias


def same_conv(
    w: Weights,
    module: str,
    matmul: bool,
    *,
    dilation: int = 1,
    input_scale: np.ndarray | None = None,
    normed: bool = False,
) -> Conv:
    """A stride-1 convolution with 'same' padding (every one of Kokoro's has an odd kernel),
    of its input times ``input_scale`` per channel where given (folded into the weights).
    ``normed``: an instance norm follows, which subtracts any per-channel constant again, so
    the bias is left out (an addition and its broadcast a call)."""
    weight = w[f"{module}.weight"]  # (out, kernel, in)
    if input_scale is not None:
        weight = mx.array(np.asarray(weight) * input_scale.astype(np.float32))
    bias = None if normed else w.get(f"{module}.bias")
    return SameConv(weight, bias, dilation=dilation, matmul=matmul)


def grouped_same_conv(
    w: Weights, modules: list[str], matmul: bool, *, normed: bool = False
) -> Conv:
    """Convolutions of the same shape over consecutive channel groups of one input, as one
    convolution: MLX's grouped ``conv1d`` natively, else one block-diagonal weight (which
    computes the zero blocks too: the matmul per tap has no groups)."""
    if len(modules) == 1:
        return same_conv(w, modules[0], matmul, normed=normed)
    weights = [np.asarray(w[f"{m}.weight"]) for m in modules]  # (O, K, I) each
    out_channels, kernel, in_channels = weights[0].shape
    biases = [w.get(f"{m}.bias") for m in modules]
    bias = (
        None
        if normed or any(b is None for b in biases)
        else mx.array(np.concatenate([np.asarray(b) for b in biases]))
    )
    groups = len(modules)
    if matmul or kernel == 1:
        full = np.zeros((groups * out_channels, kernel, groups * in_channels), np.float32)
        for i, weight in enumerate(weights):
            rows, columns = slice(i * out_channels, (i + 1) * out_channels), i * in_channels
            full[rows, :, columns : columns + in_channels] = weight
        return SameConv(mx.array(full), bias, matmul=matmul)
    conv = SameConv(mx.array(np.concatenate(weights)), bias, matmul=False)
    conv.groups = groups
    return conv


class StridedConv:
    """A strided convolution as a stride-1 one over blocks of ``stride`` samples: the kernel is
    zero-padded to whole blocks, so nothing is computed for the outputs that are skipped."""

    def __init__(
        self, weight: mx.array, bias: mx.array | None, stride: int, padding: int, matmul: bool
    ) -> None:
        w = np.asarray(weight)  # (O, K, I)
        out_channels, kernel, in_channels = w.shape
        blocks = -(-kernel // stride)
        padded = np.zeros((out_channels, blocks * stride, in_channels), np.float32)
        padded[:, :kernel] = w
        self._conv = Conv(
            mx.array(padded.reshape(out_channels, blocks, stride * in_channels)),
            bias,
            matmul=matmul,
        )
        self.kernel, self.stride, self.padding = int(kernel), stride, padding
        self.blocks = blocks

    def __call__(self, x: mx.array) -> mx.array:
        *batch, length, channels = x.shape
        out = (length + 2 * self.padding - self.kernel) // self.stride + 1
        total = (out + self.blocks - 1) * self.stride
        right = max(total - length - self.padding, 0)
        x = pad_time(x, self.padding, right)[..., :total, :]
        blocks = x.reshape(*batch, total // self.stride, self.stride * channels)
        return self._conv.valid(blocks)[..., :out, :]


def instance_norm(x: mx.array, eps: float = 1e-5) -> mx.array:
    """Each channel normalised over time: a layer norm of the transposed view, one node on a
    GPU where the means as matmuls, centring, variance and scaling were eight."""
    return mx.fast.layer_norm(x.swapaxes(-1, -2), None, None, eps).swapaxes(-1, -2)


class Lengths:
    """Utterances of ``frames`` decoded together, padded to the longest: where each one's
    samples end along a time axis, so that what the padding holds reaches no valid sample.
    Every time axis of the decoder is ``a`` samples a frame plus ``c`` (``RATES``)."""

    RATES = ((1, 0), (2, 0), (20, 0), (120, 1), (600, 0))
    """Frames, F0 values, the first stage's samples, the second's (and the harmonics' STFT
    frames, one more), the harmonic source's samples."""

    def __init__(self, frames: list[int]) -> None:
        self.frames = np.asarray(frames, np.int64)
        self.padded = int(self.frames.max())
        self._masks: dict[int, tuple[mx.array, mx.array]] = {}

    def valid(self, length: int) -> np.ndarray:
        """Each utterance's valid samples along a padded time axis of ``length``."""
        for a, c in self.RATES:
            if a * self.padded + c == length:
                return a * self.frames + c
        raise ValueError(f"no time axis of {length} for {self.padded} frames")

    def mask(self, length: int) -> tuple[mx.array, mx.array]:
        """``(utterances, length, 1)``: one where a sample is valid, else zero; and each
        utterance's valid count, ``(utterances, 1, 1)``."""
        if length not in self._masks:
            valid = self.valid(length)
            ones = (np.arange(length)[None, :] < valid[:, None]).astype(np.float32)
            count = valid.astype(np.float32).reshape(-1, 1, 1)
            self._masks[length] = (mx.array(ones[..., None]), mx.array(count))
        return self._masks[length]


def masked_instance_norm(x: mx.array, lengths: Lengths, eps: float = 1e-5) -> mx.array:
    """``instance_norm`` of each utterance of a padded batch over its own samples (zero past
    them)."""
    mask, count = lengths.mask(int(x.shape[-2]))
    mean = (x * mask).sum(axis=-2, keepdims=True) / count
    centred = (x - mean) * mask
    variance = (centred * centred).sum(axis=-2, keepdims=True) / count
    return centred * mx.rsqrt(variance + eps)


def layer_norm(x: mx.array, weight: mx.array, bias: mx.array, eps: float) -> mx.array:
    return mx.fast.layer_norm(x, weight, bias, eps)


class Linear:
    """``x @ W.T + b``, with ``W.T`` made contiguous once."""

    def __init__(self, w: Weights, module: str) -> None:
        self.weight_t = mx.array(np.ascontiguousarray(np.asarray(w[f"{module}.weight"]).T))
        self.bias = w.get(f"{module}.bias")

    def __call__(self, x: mx.array) -> mx.array:
        return x @ self.weight_t if self.bias is None else mx.addmm(self.bias, x, self.weight_t)


def _plus_one_gamma(w: Weights, module: str, times: np.ndarray | None = None) -> Linear:
    """A style projection to ``(gamma, beta)`` whose ``gamma`` comes out as ``1 + gamma``:
    the one added to every scale, folded into the bias once; both times ``times`` per channel
    where given (a Snake's alpha, folded)."""
    fc = Linear(w, f"{module}.fc")
    assert fc.bias is not None
    weight, bias = np.array(fc.weight_t), np.array(fc.bias)
    bias[: len(bias) // 2] += 1.0
    if times is not None:
        weight, bias = weight * np.tile(times, 2), bias * np.tile(times, 2)
    fc.weight_t, fc.bias = mx.array(weight), mx.array(bias)
    return fc


class StyleBank:
    """Every style projection of one component (its norms), as one matmul: the style vector is
    the same for all of them, so dozens of small matmuls, each with its split, become one.
    Each norm registers its projection here, in the ``group`` of norms whose inputs have one
    shape but for their channels (one time length), or in none (each its own broadcast)."""

    def __init__(self) -> None:
        self._parts: list[tuple[Linear, str | None]] = []
        self._weight: mx.array | None = None
        self._bias = mx.array(0.0)
        self._groups: list[str | None] = []
        self._group_cuts: list[int] = []
        self._cuts: dict[str | None, list[int]] = {}
        self._where: list[tuple[str | None, int]] = []

    def add(self, fc: Linear, group: str | None = None) -> int:
        """The slot of ``fc``'s ``(scale, shift)``: what ``Styles`` are asked for."""
        self._parts.append((fc, group))
        return len(self._parts) - 1

    def __call__(self, style: mx.array) -> Styles:
        if self._weight is None:  # every norm is registered by the first call
            self._weight = self._arrange()
        flat = mx.addmm(self._bias, style, self._weight)
        if style.ndim == 2:  # one style per utterance of a batch: broadcast along time
            flat = flat.reshape(flat.shape[0], 1, -1)
        vectors = split_at(flat, self._group_cuts, -1)
        return Styles(dict(zip(self._groups, vectors, strict=True)), self._cuts, self._where)

    def _arrange(self) -> mx.array:
        """The projections' weights, group by group, each norm's scale then shift (their
        biases and cuts kept)."""
        self._groups = list(dict.fromkeys(group for _, group in self._parts))
        members = {
            g: [(i, fc) for i, (fc, group) in enumerate(self._parts) if group == g]
            for g in self._groups
        }
        self._where = [(None, 0)] * len(self._parts)
        columns, sizes = [], []
        for group in self._groups:
            halves = []
            for k, (slot, fc) in enumerate(members[group]):
                self._where[slot] = (group, 2 * k)
                columns.append(fc)
                halves += [int(fc.weight_t.shape[1]) // 2] * 2
            self._cuts[group] = np.cumsum(halves)[:-1].tolist()
            sizes.append(sum(halves))
        self._group_cuts = np.cumsum(sizes)[:-1].tolist()
        self._bias = mx.array(np.concatenate([np.asarray(fc.bias) for fc in columns]))
        return mx.array(np.concatenate([fc.weight_t for fc in columns], axis=1))


class Styles:
    """One call of a bank: each norm's scale and shift. A group's are broadcast to the shape of
    its first input that asks (known only then) and cut from there, together: one broadcast and
    a few splits, where each norm's scale and shift were a broadcast each."""

    def __init__(
        self,
        vectors: dict[str | None, mx.array],
        cuts: dict[str | None, list[int]],
        where: list[tuple[str | None, int]],
    ) -> None:
        self._vectors, self._cuts, self._where = vectors, cuts, where
        self._parts: dict[str | None, list[mx.array]] = {}
        self.lengths: Lengths | None = None
        """Set for a padded batch of utterances (``Decoder.batch``): norms see each one's
        own samples, and a convolution's input is zero past them."""

    def norm(self, x: mx.array) -> mx.array:
        """``instance_norm``, each utterance over its own samples in a padded batch."""
        return instance_norm(x) if self.lengths is None else masked_instance_norm(x, self.lengths)

    def masked(self, x: mx.array) -> mx.array:
        """``x`` zero past each utterance's samples in a padded batch (as a convolution pads
        one utterance): before every operation that reads a neighbouring sample."""
        return x if self.lengths is None else x * self.lengths.mask(int(x.shape[-2]))[0]

    def __call__(self, slot: int, x: mx.array) -> tuple[mx.array, mx.array]:
        """Slot ``slot``'s scale and shift for the input ``x``: ``(C,)`` each, or ``x``'s shape
        where the slot has a group."""
        group, index = self._where[slot]
        if group not in self._parts:
            vector = self._vectors[group]
            if group is not None:
                vector = mx.broadcast_to(vector, (*x.shape[:-1], vector.shape[-1]))
            self._parts[group] = split_at(vector, self._cuts[group], -1)
        scale, shift = self._parts[group][index : index + 2]
        assert group is None or scale.shape[:-1] == x.shape[:-1], f"{group}: another length"
        return scale, shift


class AdaIN:
    """Instance norm whose scale and shift come from the style vector (through a bank, in
    ``group``), the result times ``times`` per channel where given (folded into the
    projection)."""

    def __init__(
        self,
        w: Weights,
        module: str,
        bank: StyleBank,
        times: np.ndarray | None = None,
        *,
        group: str | None = None,
    ) -> None:
        self.slot = bank.add(_plus_one_gamma(w, module, times), group)

    def __call__(self, x: mx.array, styles: Styles) -> mx.array:
        scale, shift = styles(self.slot, x)
        return scale * styles.norm(x) + shift


class GroupedAdaIN(AdaIN):
    """AdaINs over consecutive channel groups of one input, their projections as one (scales
    of every group, then shifts): an instance norm is per channel, so one serves them all.
    ``times``: each group's factor per channel, as ``AdaIN``'s."""

    def __init__(
        self,
        w: Weights,
        modules: list[str],
        bank: StyleBank,
        times: list[np.ndarray] | None = None,
        *,
        group: str | None = None,
    ) -> None:
        factors: list[np.ndarray | None] = list(times) if times else [None] * len(modules)
        fcs = [_plus_one_gamma(w, m, t) for m, t in zip(modules, factors, strict=True)]
        weights = [np.split(np.asarray(fc.weight_t), 2, axis=1) for fc in fcs]
        biases = [np.split(np.asarray(fc.bias), 2) for fc in fcs]
        weight_t = np.concatenate([h[0] for h in weights] + [h[1] for h in weights], axis=1)
        bias = np.concatenate([b[0] for b in biases] + [b[1] for b in biases])
        fc = Linear({"g.weight": mx.array(weight_t.T), "g.bias": mx.array(bias)}, "g")
        self.slot = bank.add(fc, group)


class AdaLayerNorm:
    def __init__(self, w: Weights, module: str, bank: StyleBank) -> None:
        self.slot = bank.add(_plus_one_gamma(w, module))

    def __call__(self, x: mx.array, styles: Styles) -> mx.array:
        scale, shift = styles(self.slot, x)
        if scale.ndim == 1:  # one utterance's style: the norm's own weight and bias
            return mx.fast.layer_norm(x, scale, shift, 1e-5)
        return mx.fast.layer_norm(x, None, None, 1e-5) * scale + shift  # one per utterance


def _sigmoid_gates_first(w: mx.array) -> np.ndarray:
    """PyTorch's gate order ``i f g o`` as ``i f o g``: the three sigmoid gates, then tanh's."""
    i, f, g, o = np.split(np.asarray(w), 4, axis=0)
    return np.concatenate([i, f, o, g], axis=0)


def _gates(z: mx.array) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """``i``, ``f``, ``o`` and ``tanh(g)`` of the pre-activations ``z`` (``i f o g``)."""
    sigmoid, g = mx.split(z, [3 * (z.shape[-1] // 4)], axis=-1)
    i, f, o = mx.split(mx.sigmoid(sigmoid), 3, axis=-1)
    return i, f, o, mx.tanh(g)


def lstm_step(x: mx.array, h: mx.array, c: mx.array, w_h: mx.array) -> tuple[mx.array, mx.array]:
    """One LSTM step of a stack of cells: ``x`` their input projections ``(n, 1, 4H)`` in the
    order ``i f o g``, ``h`` and ``c`` their states ``(n, 1, H)``, ``w_h`` ``(n, H, 4H)``."""
    i, f, o, g = _gates(mx.addmm(x, h, w_h))
    c = f * c + i * g
    return o * mx.tanh(c), c


def lstm_start(x: mx.array) -> tuple[mx.array, mx.array]:
    """``lstm_step`` from zero states: no recurrence and no ``f c`` (three operations less)."""
    i, _, o, g = _gates(x)
    c = i * g
    return o * mx.tanh(c), c


_compiled_step, _compiled_start = mx.compile(lstm_step), mx.compile(lstm_start)


class BiLSTM:
    """PyTorch's bidirectional one-layer LSTM. The input projections of every step and both
    directions are one matmul; the directions then advance together, one batched step (a
    matmul, two activations, a few products) per time step: the loop is what costs."""

    def __init__(self, w: Weights, module: str, *, compiled: bool | None = None) -> None:
        def both(name: str) -> tuple[np.ndarray, np.ndarray]:
            return (
                _sigmoid_gates_first(w[f"{module}.{name}_l0"]),
                _sigmoid_gates_first(w[f"{module}.{name}_l0_reverse"]),
            )

        w_ih, b_ih, b_hh, w_hh = (
            both("weight_ih"),
            both("bias_ih"),
            both("bias_hh"),
            both("weight_hh"),
        )
        self.hidden = int(w_hh[0].shape[1])
        # Input projections for both directions in one batched matmul: (2, in, 4H).
        self.w_in = mx.array(np.stack([w_ih[0].T, w_ih[1].T]))
        self.b_in = mx.array(np.stack([b_ih[0] + b_hh[0], b_ih[1] + b_hh[1]])[:, None])
        self.w_h = mx.array(np.stack([w_hh[0].T, w_hh[1].T]))  # (2, H, 4H)
        if compiled is None:  # fused on a GPU (one graph: every step has the same shapes)
            compiled = mx.default_device() != mx.cpu
        self.compiled = compiled
        self.step = _compiled_step if compiled else lstm_step
        self.start = _compiled_start if compiled else lstm_start

    def steps(self, x: mx.array) -> mx.array:
        """``(2, T, 4H)``: direction d's input at its step t is ``steps[d, t]`` (the backward
        one reads T-1-t): the rows of ``x`` both ways in one gather, one batched matmul."""
        forward = np.arange(x.shape[0], dtype=np.int32)
        return mx.addmm(self.b_in, x[mx.array(np.stack([forward, forward[::-1]]))], self.w_in)

    def __call__(self, x: mx.array, lengths: list[int] | None = None) -> mx.array:
        return run_bilstms([self], [x], lengths)[0]


@lru_cache(maxsize=8)
def _stacked_recurrence(lstms: tuple[BiLSTM, ...]) -> mx.array:
    if len(lstms) == 1:
        return lstms[0].w_h
    return mx.array(np.concatenate([np.asarray(lstm.w_h) for lstm in lstms]))


def _states(lstm: BiLSTM, steps: mx.array, w_h: mx.array) -> list[mx.array]:
    """The hidden states of every step of the cells stacked on ``steps``' first axis (their
    inputs along its second), ``w_h`` their recurrent weights: the first from zero states."""
    first, *rest = split_each(steps, 1)
    h, c = lstm.start(first)
    outputs = [h]
    for x in rest:
        h, c = lstm.step(x, h, c, w_h)
        outputs.append(h)
    return outputs


def split_at(x: mx.array, cuts: list[int], axis: int) -> list[mx.array]:
    """``x`` cut before each of ``cuts`` (ascending) along ``axis``. MLX's split is one
    operation for up to 10 parts (beyond, a slice a part): a tree of such splits, each full
    but the last (pieces of 10, 100, ... parts), about ``n / 9`` operations for ``n`` parts."""
    if len(cuts) < 10:
        return list(mx.split(x, cuts, axis=axis)) if cuts else [x]
    size = 10  # parts a piece: the largest power of ten below the parts there are
    while 10 * size <= len(cuts):
        size *= 10
    tops = cuts[size - 1 :: size]
    starts = [0, *tops]
    inner = [
        [c - start for c in cuts if start < c < end]
        for start, end in zip(starts, [*tops, x.shape[axis]], strict=True)
    ]
    pieces = mx.split(x, tops, axis=axis)
    return [
        part for piece, c in zip(pieces, inner, strict=True) for part in split_at(piece, c, axis)
    ]


def split_each(x: mx.array, axis: int) -> list[mx.array]:
    """``x`` cut into its single positions along ``axis`` (a tree of splits: ``split_at``)."""
    return split_at(x, list(range(1, x.shape[axis])), axis)


def run_bilstms(
    lstms: list[BiLSTM], inputs: list[mx.array], lengths: list[int] | None = None
) -> list[mx.array]:
    """Independent BiLSTMs (the same hidden size) over inputs of the same length, advanced
    together: one batched step of all their directions per time step, not one per LSTM. Each
    step's input is one output of a tree of splits (not a slice a step); each LSTM's output,
    in time order with both directions side by side, one gather of the steps' states.

    ``lengths``: the inputs are padded batches ``(utterances, T, C)`` of utterances of these
    lengths (:func:`_padded_bilstms`)."""
    if lengths is not None:
        return _padded_bilstms(lstms, inputs, lengths)
    length, hidden = inputs[0].shape[0], lstms[0].hidden
    assert all(x.shape[0] == length for x in inputs)
    assert all(lstm.hidden == hidden for lstm in lstms)
    parts = [lstm.steps(x) for lstm, x in zip(lstms, inputs, strict=True)]
    steps = mx.concatenate(parts) if len(parts) > 1 else parts[0]  # (2n, T, 4H)
    outputs = _states(lstms[0], steps, _stacked_recurrence(tuple(lstms)))
    out = mx.concatenate(outputs) if length > 1 else outputs[0]  # (T * 2n, 1, H)
    rows = np.arange(length, dtype=np.int32) * 2 * len(lstms)  # step t's cell k: t * 2n + k
    return [
        out[mx.array(np.stack([rows + 2 * k, rows[::-1] + 2 * k + 1], axis=1))].reshape(
            length, 2 * hidden
        )
        for k in range(len(lstms))
    ]


def _padded_bilstms(
    lstms: list[BiLSTM], inputs: list[mx.array], lengths: list[int]
) -> list[mx.array]:
    """``run_bilstms`` over padded batches ``(utterances, T, C)``: every utterance steps
    beside the others (a step is one batched matmul for all of them, as for one), and its
    backward direction starts at its own last row, so its output is what it has alone, and
    rows past its length hold whatever the padding gives."""
    batch, length, hidden = int(inputs[0].shape[0]), int(inputs[0].shape[1]), lstms[0].hidden
    valid = np.asarray(lengths, np.int64)[None, :]
    t = np.arange(length)[:, None]
    back = np.where(t < valid, valid - 1 - t, t)  # (T, utterances): the row read at step t
    rows = np.arange(batch)[None, :] * length
    order = mx.array(np.stack([t + rows, back + rows]).astype(np.int32))  # (2, T, utterances)
    parts = [
        mx.addmm(lstm.b_in[:, None], x.reshape(-1, x.shape[-1])[order], lstm.w_in[:, None])
        for lstm, x in zip(lstms, inputs, strict=True)
    ]
    steps = mx.concatenate(parts) if len(parts) > 1 else parts[0]  # (2n, T, utterances, 4H)
    # A compiled step (a GPU's) is traced and built once per shape, and sessions begin
    # sentences in any number: rows of zeros up to a power of two keep its shapes to a few.
    width = 1 << (batch - 1).bit_length() if lstms[0].compiled else batch
    if width > batch:
        steps = mx.pad(steps, [(0, 0), (0, 0), (0, width - batch), (0, 0)])
    outputs = _states(lstms[0], steps, _stacked_recurrence(tuple(lstms))[:, None])
    out = mx.concatenate(outputs, axis=1) if length > 1 else outputs[0]  # (2n, T, width, H)
    out = out.reshape(-1, hidden)  # direction d's step t for row b: (d T + t) width + b
    utterance = np.arange(batch)[:, None]
    return [
        out[
            mx.array(
                np.stack(
                    [
                        (2 * k * length + t.T) * width + utterance,
                        ((2 * k + 1) * length + back.T) * width + utterance,
                    ],
                    axis=-1,
                ).astype(np.int32)
            )
        ].reshape(batch, length, 2 * hidden)
        for k in range(len(lstms))
    ]


class DepthwiseUpsample:
    """``ConvTranspose1d(C, C, 3, stride=2, padding=1, output_padding=1, groups=C)``: T -> 2T.
    Its even and odd outputs side by side on the channels are, reshaped, the interleaved
    output: one concatenation, reshape and bias where stacking and two biases were more."""

    def __init__(self, weight: mx.array, bias: mx.array) -> None:
        taps = np.asarray(weight)[:, :, 0].T  # (3, C)
        self.taps = [mx.array(np.ascontiguousarray(t)) for t in taps]
        self.bias = mx.array(np.tile(np.asarray(bias), 2))

    def __call__(self, x: mx.array) -> mx.array:
        nxt = pad_time(x[..., 1:, :], 0, 1)
        odd = x * self.taps[2] + nxt * self.taps[0]
        *batch, length, channels = x.shape
        both = mx.concatenate([x * self.taps[1], odd], axis=-1) + self.bias
        return both.reshape(*batch, 2 * length, channels)


class AdainResBlock:
    """StyleTTS 2's ``AdainResBlk1d``: two AdaIN/LeakyReLU/conv stages beside a shortcut,
    optionally doubling the frame rate (nearest on the shortcut, a transposed conv inside).

    ``module`` a list: blocks of the same shape side by side, each on its own consecutive
    channels of the input and output (as one block: the prosody's F0 and energy branches).
    With a shortcut convolution the sum's ``1 / sqrt(2)`` is folded into both convolutions'
    weights (a product and its broadcast a call less). ``group``: its norms' group in the
    bank (the second norm's is ``"{group} x2"`` where the block doubles the frame rate)."""

    def __init__(
        self,
        w: Weights,
        module: str | list[str],
        matmul: bool,
        bank: StyleBank,
        group: str | None = None,
    ) -> None:
        modules = [module] if isinstance(module, str) else module
        first = modules[0]
        upsampled = f"{first}.pool.weight" in w
        after = f"{group} x2" if group is not None and upsampled else group
        self.scale = None if f"{first}.conv1x1.weight" in w else 1.0 / math.sqrt(2.0)
        if self.scale is None:
            w = w | {
                f"{m}.{conv}.{p}": w[f"{m}.{conv}.{p}"] * (1.0 / math.sqrt(2.0))
                for m in modules
                for conv in ("conv2", "conv1x1")
                for p in ("weight", "bias")
                if f"{m}.{conv}.{p}" in w
            }
        if len(modules) == 1:
            self.norm1: AdaIN = AdaIN(w, f"{first}.norm1", bank, group=group)
            self.norm2: AdaIN = AdaIN(w, f"{first}.norm2", bank, group=after)
        else:
            self.norm1 = GroupedAdaIN(w, [f"{m}.norm1" for m in modules], bank, group=group)
            self.norm2 = GroupedAdaIN(w, [f"{m}.norm2" for m in modules], bank, group=after)
        self.conv1, self.conv2 = (
            grouped_same_conv(w, [f"{m}.conv1" for m in modules], matmul, normed=True),
            grouped_same_conv(w, [f"{m}.conv2" for m in modules], matmul),
        )
        self.shortcut = (
            grouped_same_conv(w, [f"{m}.conv1x1" for m in modules], matmul)
            if f"{first}.conv1x1.weight" in w
            else None
        )
        self.pool = (
            DepthwiseUpsample(
                mx.array(np.concatenate([np.asarray(w[f"{m}.pool.weight"]) for m in modules])),
                mx.array(np.concatenate([np.asarray(w[f"{m}.pool.bias"]) for m in modules])),
            )
            if upsampled
            else None
        )

    def __call__(self, x: mx.array, styles: Styles) -> mx.array:
        y = styles.masked(leaky_relu(self.norm1(x, styles), 0.2))
        if self.pool is not None:
            y = styles.masked(self.pool(y))
            x = mx.repeat(x, 2, axis=-2)
        y = self.conv2(styles.masked(leaky_relu(self.norm2(self.conv1(y), styles), 0.2)))
        if self.shortcut is not None:
            x = self.shortcut(x)
        return y + x if self.scale is None else (y + x) * self.scale
