"""Kokoro's snake activations as tables: a lookup where onnxruntime spent 17% of a sentence.

Each residual block of the generator runs ``snake(y) = y + sin(a y)^2 / a`` (a per channel)
over the adaptive norm's output ``y``, and the static graph then rounds the result to uint8
for the next int8 convolution. onnxruntime's ``Sin`` runs on one thread at about 2 ns an
element (``Tanh``: 0.3), and the snake with its rounding is six passes over the activation.
The snake never decreases (its slope is ``1 + sin(2 a y)``), so the uint8 it ends as is a step
function of ``y``: below a channel's ``low`` it is 0, above its ``high`` 255. :func:`tabulate`
writes the norm's output on a grid of :data:`LEVELS` points between them (the grid's scale and
offset folded into the norm's own per-channel scale and shift, which the style sets at run
time), and reads the uint8 from a table per channel: ``Clip``, ``Cast`` and ``GatherElements``
in place of the six passes. A grid point stands for ``y`` within half a step, so a value on
the edge of a rounding step can land one step off (``tests/test_kokoro_snakes.py`` bounds how
often); the table itself is the exact snake rounded as the graph rounds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .edges import Edges, keep_used

LEVELS = 4096
"""Grid points per channel: a step of about a sixteenth of the output's rounding step in most
channels (a table of 4 KB a channel, 36 MB for the generator's 48 snakes)."""


@dataclass(frozen=True)
class Snake:
    """One snake between an adaptive norm and the rounding of an int8 convolution's input."""

    norm: Any  # InstanceNormalization(x, scale, shift) -> y
    alpha: np.ndarray[Any, Any]  # (channels,)
    inverse: np.ndarray[Any, Any]  # the graph's 1 / alpha, (channels,)
    scale: float  # the rounding's, one per tensor
    zero_point: int
    quantized: str  # the uint8 the convolution reads
    nodes: tuple[Any, ...]  # Mul(a), Sin, square, Mul(1/a), Add, QuantizeLinear: replaced

    def __call__(self, y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The snake of ``y`` (channels first, in float64)."""
        a, r = (
            v.astype(np.float64).reshape(-1, *([1] * (y.ndim - 1)))
            for v in (self.alpha, self.inverse)
        )
        out: np.ndarray[Any, Any] = y + r * np.sin(a * y) ** 2
        return out

    def rounded(self, y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``QuantizeLinear`` of the snake of ``y``: to nearest, ties to even, saturating."""
        codes = np.rint(self(y) / self.scale) + self.zero_point
        out: np.ndarray[Any, Any] = np.clip(codes, 0, 255).astype(np.uint8)
        return out

    def bounds(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Per channel, the ``y`` below which the rounded snake is 0 and above which it is 255
        (by bisection: the snake never decreases, and lies between ``y`` and ``y + 1/a``)."""
        r = self.inverse.astype(np.float64)
        ends = []
        for code, keep_low in ((-0.5, True), (255.5, False)):
            target = (code - self.zero_point) * self.scale
            low, high = target - np.maximum(r, 0) - 1, target - np.minimum(r, 0) + 1
            for _ in range(80):
                middle = (low + high) / 2
                below = self(middle[:, None])[:, 0] < target
                low, high = np.where(below, middle, low), np.where(below, high, middle)
            ends.append(low if keep_low else high)
        return ends[0], ends[1]

    def table(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The grid's per-channel step count per unit and offset (``index = y * per_unit +
        offset``, rounded by the half added to it), and the rounded snake at each point."""
        low, high = self.bounds()
        per_unit = (LEVELS - 1) / (high - low)
        grid = low[:, None] + np.arange(LEVELS)[None, :] / per_unit[:, None]
        return per_unit, 0.5 - low * per_unit, self.rounded(grid)


def find(edges: Edges, sin: Any) -> Snake | None:
    """The snake around ``sin``, where the graph spells it as the export does after the
    static graph's quantization and nothing else reads its parts; else None."""
    made, readers = edges.producer, edges.consumers
    outputs = {o.name for o in edges.graph.output}

    def only(name: str, op: str) -> Any:
        found = {id(n): n for n in readers.get(name, [])}
        node = next(iter(found.values())) if len(found) == 1 and name not in outputs else None
        return node if node is not None and node.op_type == op else None

    scaled = made.get(sin.input[0])
    square = only(sin.output[0], "Mul")
    if square is None or list(square.input) != [sin.output[0]] * 2:
        return None
    over = only(square.output[0], "Mul")
    alpha, inverse = _constant_and_other(edges, scaled), _constant_and_other(edges, over)
    if alpha is None or inverse is None:
        return None
    (a, y), (r, _) = alpha, inverse
    norm = made.get(y)
    add = only(over.output[0], "Add")
    quantize = only(add.output[0], "QuantizeLinear") if add is not None else None
    if norm is None or norm.op_type != "InstanceNormalization" or quantize is None:
        return None
    if y in outputs or y not in add.input or {id(n) for n in readers[y]} != {id(scaled), id(add)}:
        return None
    scale, zero = (edges.constant(name) for name in quantize.input[1:3])
    if scale is None or zero is None or scale.size != 1 or zero.dtype != np.uint8:
        return None
    alphas, inverses = edges.array(a), edges.array(r)
    if alphas.shape != inverses.shape or alphas.ndim != 3 or alphas.shape[::2] != (1, 1):
        return None  # one per channel, (1, channels, 1), as the table is laid out
    return Snake(
        norm, alphas.ravel(), inverses.ravel(), float(scale), int(zero),
        quantize.output[0], (scaled, sin, square, over, add, quantize),
    )  # fmt: skip


def _constant_and_other(edges: Edges, node: Any) -> tuple[str, str] | None:
    """A ``Mul`` node's initializer input and its other input, or None."""
    if node is None or node.op_type != "Mul":
        return None
    constants = [i for i in node.input if i in edges.initializers]
    others = [i for i in node.input if i not in edges.initializers]
    return (constants[0], others[0]) if len(constants) == len(others) == 1 else None


def tabulate(model: Any) -> int:
    """Rewrite ``model`` (an ``onnx.ModelProto``, batch one) in place as described above:
    every snake :func:`find` finds; returns how many."""
    graph = model.graph
    edges = Edges(graph)
    replaced: dict[int, list[Any]] = {}
    gone: set[int] = set()
    for node in graph.node:
        snake = find(edges, node) if node.op_type == "Sin" else None
        if snake is not None:
            replaced[id(snake.norm)] = _looked_up(snake, graph)
            gone.update(id(n) for n in snake.nodes)
    kept = [new for n in graph.node if id(n) not in gone for new in replaced.get(id(n), [n])]
    keep_used(graph, kept)
    return len(replaced)


def _looked_up(snake: Snake, graph: Any) -> list[Any]:
    """The nodes that put ``snake``'s norm on its grid and read its table (added to
    ``graph``'s initializers), writing the uint8 its convolution reads."""
    from onnx import TensorProto, helper, numpy_helper

    per_unit, offset, table = snake.table()
    norm, name = snake.norm, snake.norm.name
    x, scale, shift = norm.input
    epsilon = next((a.f for a in norm.attribute if a.name == "epsilon"), 1e-5)

    def value(suffix: str) -> str:
        return f"{name}/{suffix}"

    constants = {
        "per_unit": per_unit.astype(np.float32),
        "offset": offset.astype(np.float32),
        "first": np.array(0, np.float32),
        "last": np.array(LEVELS - 1, np.float32),
        "table": table[None],
    }
    graph.initializer.extend(numpy_helper.from_array(v, value(k)) for k, v in constants.items())
    node = helper.make_node
    return [
        node("Mul", [scale, value("per_unit")], [value("grid_scale")]),
        node("Mul", [shift, value("per_unit")], [value("shift_on_grid")]),
        node("Add", [value("shift_on_grid"), value("offset")], [value("grid_shift")]),
        node(
            "InstanceNormalization", [x, value("grid_scale"), value("grid_shift")],
            [value("on_grid")], name, epsilon=epsilon,
        ),
        node("Clip", [value("on_grid"), value("first"), value("last")], [value("clipped")]),
        node("Cast", [value("clipped")], [value("index")], to=TensorProto.INT32),
        node(
            "GatherElements", [value("table"), value("index")], [snake.quantized],
            value("snake_table"), axis=2,
        ),
    ]  # fmt: skip
