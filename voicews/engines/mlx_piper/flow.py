"""The flow that turns the prior's latents into the decoder's, run in reverse."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from .layers import Conv, conv_from, count_modules, masked
from .weights import VoiceWeights


@dataclass(frozen=True)
class Coupling:
    """A mean-only residual coupling layer with its WaveNet-style stack (flow, reverse)."""

    pre: Conv
    in_layers: list[Conv]
    res_skip: list[Conv]
    post: Conv
    half: int
    hidden: int

    def wavenet(self, h: mx.array, mask: mx.array | None = None) -> mx.array:
        out: mx.array | None = None
        last = len(self.in_layers) - 1
        for i, (conv_in, conv_rs) in enumerate(zip(self.in_layers, self.res_skip, strict=True)):
            rs = conv_rs(gated(conv_in(masked(h, mask)), self.hidden))
            skip = rs if i == last else rs[..., self.hidden :]
            if i != last:
                h = h + rs[..., : self.hidden]
            out = skip if out is None else out + skip
        assert out is not None
        return out

    def reverse(self, z: mx.array, mask: mx.array | None = None) -> mx.array:
        x0 = z[..., : self.half]
        m = self.post(self.wavenet(self.pre(x0), mask))
        return mx.concatenate([x0, z[..., self.half :] - m], axis=-1)


def gated(x: mx.array, hidden: int) -> mx.array:
    return mx.tanh(x[..., :hidden]) * mx.sigmoid(x[..., hidden:])


class Flow:
    """The residual coupling block in reverse: prior sample -> decoder latent."""

    def __init__(self, w: VoiceWeights, matmul: bool) -> None:
        indices = sorted(
            (
                int(k.split(".")[2])
                for k in w.arrays
                if k.startswith("flow.flows.") and k.endswith(".pre.weight")
            ),
            reverse=True,
        )
        self.couplings = []
        for i in indices:
            p = f"flow.flows.{i}"
            n = count_modules(w, p + ".enc.in_layers.{}.weight")
            pre = conv_from(w, f"{p}.pre", matmul)
            self.couplings.append(
                Coupling(
                    pre=pre,
                    in_layers=[conv_from(w, f"{p}.enc.in_layers.{j}", matmul) for j in range(n)],
                    res_skip=[
                        conv_from(w, f"{p}.enc.res_skip_layers.{j}", matmul) for j in range(n)
                    ],
                    post=conv_from(w, f"{p}.post", matmul),
                    half=int(w[f"{p}.pre.weight"].shape[2]),
                    hidden=pre.out_channels,
                )
            )
        self.reach = sum(c.pad_left for cp in self.couplings for c in cp.in_layers)
        """Latent frames of context each side that one output frame depends on."""

    def reverse(self, z: mx.array, mask: mx.array | None = None) -> mx.array:
        """``z``: ``(T, C)``, or ``(B, T, C)`` for sentences padded past ``mask``
        (:func:`.layers.time_mask`)."""
        for coupling in self.couplings:
            z = coupling.reverse(z[..., ::-1], mask)
        return z
