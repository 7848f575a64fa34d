"""An ONNX graph's edges (who makes and who reads each value), and pruning what nothing reads:
what :mod:`.graphs` and :mod:`.fused` rewrite the shipped graph with."""

from __future__ import annotations

from typing import Any

import numpy as np


class Edges:
    """Who produces and who consumes each value, and the initializers by name."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.initializers = {t.name: t for t in graph.initializer}
        self.producer: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in node.output:
                self.producer[name] = node
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def array(self, name: str) -> np.ndarray[Any, Any]:
        from onnx import numpy_helper

        return numpy_helper.to_array(self.initializers[name])

    def constant(self, name: str) -> np.ndarray[Any, Any] | None:
        """``name``'s value where it is an initializer or a ``Constant`` node's, else None."""
        from onnx import numpy_helper

        if name in self.initializers:
            return self.array(name)
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def only_consumer(self, name: str, op: str) -> Any:
        consumers = self.consumers.get(name, [])
        if len(consumers) != 1 or consumers[0].op_type != op:
            raise ValueError(f"{name}: expected one {op} after it, found {consumers}")
        return consumers[0]


def keep_used(graph: Any, nodes: list[Any]) -> None:
    """Set ``graph``'s nodes to those of ``nodes`` something still reads (the quantization of
    inputs and biases no longer does), and drop the initializers nothing reads."""
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(nodes):  # topological order: consumers come after producers
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
            needed.update(_subgraph_inputs(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))
    used = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(used)


def _subgraph_inputs(node: Any) -> set[str]:
    from onnx import AttributeProto

    names: set[str] = set()
    for attribute in node.attribute:
        if attribute.type == AttributeProto.GRAPH:
            for inner in attribute.g.node:
                names.update(inner.input)
    return names
