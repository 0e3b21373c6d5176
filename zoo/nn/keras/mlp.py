"""The transformer feed-forward block, the twin of ``zoo.nn.torch.mlp`` step for step.

Same sub-layer names (``fc1``, ``act``, ``drop1``, ``fc2``, ``drop2``), so the weight port
(:func:`zoo.nn.ports.mlp`) finds ``fc1.kernel`` where torch has ``fc1.weight``. The dense
layers are zoo's (bias added in float32 under mixed precision, docs/precision.md), and
GELU is spelled out: ``keras.ops.gelu`` defaults to the tanh approximation, torch's
``nn.GELU()`` to the exact erf form.
"""

from __future__ import annotations

import functools
import math

import keras
from keras import layers, ops

from zoo.nn.keras.linear import Dense

ACTIVATIONS = {
    "gelu": functools.partial(keras.activations.gelu, approximate=False),
    "gelu_tanh": functools.partial(keras.activations.gelu, approximate=True),
    "relu": keras.activations.relu,
    "silu": keras.activations.silu,
}


def torch_linear_init(fan_in: int) -> keras.initializers.Initializer:
    """``nn.Linear``'s default draw for a kernel or a bias, U(+-1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


def _fresh(initializer):
    """A copy of ``initializer`` for one layer: an unseeded Keras initializer instance draws
    the same values every time it is called, so two layers must not share one."""
    if isinstance(initializer, keras.initializers.Initializer):
        return type(initializer).from_config(initializer.get_config())
    return initializer


class Mlp(layers.Layer):
    """(..., in_features) -> (..., out_features) through ``hidden_features`` units.

    Arguments as ``zoo.nn.torch.Mlp``'s. Initialisers default to ``nn.Linear``'s
    distributions; ``kernel_initializer`` / ``bias_initializer`` replace them for both
    dense layers (a family that initialises as timm does passes its own).
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int | None = None,
        activation: str = "gelu",
        hidden_dropout: float = 0.0,
        output_dropout: float = 0.0,
        kernel_initializer: keras.initializers.Initializer | str | None = None,
        bias_initializer: keras.initializers.Initializer | str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of: {', '.join(ACTIVATIONS)}")
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.out_features = out_features or in_features
        self.activation = activation
        self.rates = (hidden_dropout, output_dropout)
        self.fc1 = Dense(
            hidden_features,
            kernel_initializer=_fresh(kernel_initializer) or torch_linear_init(in_features),
            bias_initializer=_fresh(bias_initializer) or torch_linear_init(in_features),
        )
        self.act = ACTIVATIONS[activation]
        self.drop1 = layers.Dropout(hidden_dropout)
        self.fc2 = Dense(
            self.out_features,
            kernel_initializer=_fresh(kernel_initializer) or torch_linear_init(hidden_features),
            bias_initializer=_fresh(bias_initializer) or torch_linear_init(hidden_features),
        )
        self.drop2 = layers.Dropout(output_dropout)

    def build(self, input_shape):
        if input_shape[-1] is not None and input_shape[-1] != self.in_features:
            raise ValueError(f"Mlp({self.in_features}, ...) got inputs with {input_shape[-1]} features")
        self.fc1.build((*input_shape[:-1], self.in_features))
        self.fc2.build((*input_shape[:-1], self.hidden_features))

    def call(self, x, training=False):
        hidden = self.drop1(self.act(self.fc1(x)), training=training)
        return self.drop2(self.fc2(hidden), training=training)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.out_features)

    def get_config(self):
        return {
            **super().get_config(),
            "in_features": self.in_features,
            "hidden_features": self.hidden_features,
            "out_features": self.out_features,
            "activation": self.activation,
            "hidden_dropout": self.rates[0],
            "output_dropout": self.rates[1],
        }


class GatedMlp(layers.Layer):
    """``zoo.nn.torch.GatedMlp`` (transformers' ``LlamaMLP``): Dense ``gate_proj``, ``up_proj``
    and ``down_proj``. Under mixed precision the activation runs in float32 on the rounded gate
    and is rounded once, as torch's CPU kernels compute a bfloat16 ``silu``; the product of the
    two branches is in their (compute) dtype."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        activation: str = "silu",
        bias: bool = False,
        kernel_initializer: keras.initializers.Initializer | str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of: {', '.join(ACTIVATIONS)}")
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.act = ACTIVATIONS[activation]

        def dense(units: int, fan_in: int) -> Dense:
            kernel = _fresh(kernel_initializer) or torch_linear_init(fan_in)
            return Dense(units, use_bias=bias, kernel_initializer=kernel, bias_initializer="zeros")

        self.gate_proj = dense(intermediate_size, hidden_size)
        self.up_proj = dense(intermediate_size, hidden_size)
        self.down_proj = dense(hidden_size, intermediate_size)

    def build(self, input_shape):
        self.gate_proj.build((*input_shape[:-1], self.hidden_size))
        self.up_proj.build((*input_shape[:-1], self.hidden_size))
        self.down_proj.build((*input_shape[:-1], self.intermediate_size))

    def call(self, x):
        gate = self.gate_proj(x)
        wide = keras.backend.result_type(gate.dtype, "float32")
        activated = ops.cast(self.act(ops.cast(gate, wide)), gate.dtype)
        return self.down_proj(activated * self.up_proj(x))

    def compute_output_shape(self, input_shape):
        return input_shape
