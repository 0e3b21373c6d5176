"""``zoo.nn.torch.moe`` as Keras layers: the same router, choice, weights and sum, in the same order."""

from __future__ import annotations

from keras import layers, ops

from zoo.nn.keras.linear import Dense
from zoo.nn.keras.mlp import GatedMlp


def routing(logits, top_k: int, normalise: bool):
    """As the torch twin's: the chosen experts (tokens, top_k), ties to the lower index (TensorFlow's
    ``top_k`` keeps the lower index first), and the dense float32 weights (tokens, experts)."""
    probs = ops.softmax(ops.cast(logits, "float32"), axis=-1)
    values, chosen = ops.top_k(probs, top_k, sorted=True)
    if normalise:
        values = values / ops.sum(values, axis=-1, keepdims=True)
    experts = ops.shape(probs)[-1]
    weights = ops.sum(ops.one_hot(chosen, experts, dtype="float32") * values[..., None], axis=-2)
    return chosen, weights


class SparseMoe(layers.Layer):
    """``zoo.nn.torch.moe.SparseMoe``: Dense ``gate`` and ``experts.E`` gated MLPs; ``router_logits``
    keeps the last call's scores. Not a low-precision layer itself (its Dense layers are): its
    input stays in the stream's dtype and the weighted sum is taken there."""

    def __init__(
        self, hidden_size, intermediate_size, num_experts, top_k, normalise, kernel_initializer=None, **kw
    ):
        super().__init__(**kw)
        self.hidden_size, self.top_k, self.normalise = hidden_size, top_k, normalise
        init = kernel_initializer or "glorot_uniform"
        self.gate = Dense(num_experts, use_bias=False, kernel_initializer=init)
        self.experts = [
            GatedMlp(hidden_size, intermediate_size, kernel_initializer=kernel_initializer)
            for _ in range(num_experts)
        ]
        self.router_logits = None

    def build(self, input_shape):
        self.gate.build((None, self.hidden_size))
        for expert in self.experts:
            expert.build((None, self.hidden_size))

    def call(self, x):
        flat = ops.reshape(x, (-1, self.hidden_size))
        self.router_logits = self.gate(flat)
        _, weights = routing(self.router_logits, self.top_k, self.normalise)
        # the sum in the stream's dtype, as the torch twin's (float32 under mixed precision)
        out = ops.zeros_like(flat, dtype=self.variable_dtype)
        for e, expert in enumerate(self.experts):
            out = out + ops.cast(expert(flat) * weights[:, e : e + 1], out.dtype)
        return ops.reshape(out, ops.shape(x))

    def compute_output_shape(self, input_shape):
        return input_shape


def load_balancing_loss(router_logits, top_k: int, padding=None):
    """As the torch twin's :func:`zoo.nn.torch.moe.load_balancing_loss`."""
    experts = router_logits[0].shape[-1]
    counts = probs_sum = rows = 0.0
    for logits in router_logits:
        probs = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        chosen, _ = routing(logits, top_k, normalise=False)
        real = (
            ops.ones((ops.shape(probs)[0],), "float32")
            if padding is None
            else ops.cast(ops.logical_not(ops.reshape(padding, (-1,))), "float32")
        )
        counts = counts + ops.sum(
            ops.one_hot(chosen, experts, dtype="float32") * real[:, None, None], axis=(0, 1)
        )
        probs_sum = probs_sum + ops.sum(probs * real[:, None], axis=0)
        rows = rows + ops.sum(real)
    return ops.sum((counts / rows) * (probs_sum / rows)) * experts
