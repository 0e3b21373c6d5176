"""Keras layers whose semantics follow torch exactly, where Keras' own differ.

See CROSSFRAMEWORK.md: Keras' BatchNormalization keeps a biased running variance and
weighs momentum the other way; ``keras.ops.gelu`` defaults to the tanh approximation.
"""

from __future__ import annotations

import functools
import math

import keras
from keras import ops

ACTIVATIONS = {
    "relu": keras.activations.relu,
    "gelu": functools.partial(keras.activations.gelu, approximate=False),
    "silu": keras.activations.silu,
    "tanh": keras.activations.tanh,
}


def activation(name: str):
    return ACTIVATIONS[name]


class BatchNorm(keras.layers.Layer):
    """BatchNorm over the last axis with torch's semantics.

    Normalises with the biased batch variance, updates the running variance with the
    unbiased one, weighs the new batch by ``momentum`` (torch convention) and counts
    batches in ``num_batches_tracked``, so a torch ``BatchNorm2d`` state round-trips.
    """

    def __init__(self, momentum: float = 0.1, epsilon: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum
        self.epsilon = epsilon

    def build(self, input_shape):
        channels = (int(input_shape[-1]),)
        self.gamma = self.add_weight(shape=channels, initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=channels, initializer="zeros", name="beta")
        self.moving_mean = self.add_weight(
            shape=channels, initializer="zeros", trainable=False, name="moving_mean"
        )
        self.moving_variance = self.add_weight(
            shape=channels, initializer="ones", trainable=False, name="moving_variance"
        )
        self.num_batches_tracked = self.add_weight(
            shape=(),
            initializer="zeros",
            dtype="int64",
            trainable=False,
            name="num_batches_tracked",
        )

    def call(self, x, training=False):
        x32 = ops.cast(x, "float32")
        axes = list(range(len(x.shape) - 1))
        if training:
            mean = ops.mean(x32, axis=axes)
            variance = ops.var(x32, axis=axes)
            count = math.prod(x.shape[a] for a in axes[1:]) * ops.cast(ops.shape(x)[0], "float32")
            unbiased = variance * count / ops.maximum(count - 1.0, 1.0)
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * (1 - m) + mean * m)
            self.moving_variance.assign(self.moving_variance * (1 - m) + unbiased * m)
            self.num_batches_tracked.assign_add(ops.cast(1, "int64"))
        else:
            mean, variance = self.moving_mean, self.moving_variance
        y = (x32 - mean) * ops.rsqrt(variance + self.epsilon) * self.gamma + self.beta
        return ops.cast(y, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "epsilon": self.epsilon}
