"""Keras layers whose semantics follow torch exactly, where Keras' own differ.

Keras' BatchNormalization keeps a biased running variance (torch's is unbiased) and
weighs momentum the other way; ``keras.ops.gelu`` defaults to the tanh approximation.
"""

from __future__ import annotations

import functools
import math

import keras
from keras import ops

from zoo.nn.errors import InputError, batchnorm_message
from zoo.nn.keras import require

ACTIVATIONS = {
    "relu": keras.activations.relu,
    "gelu": functools.partial(keras.activations.gelu, approximate=False),
    "silu": keras.activations.silu,
    "tanh": keras.activations.tanh,
}


def activation(name: str):
    return ACTIVATIONS[name]


def torch_recurrent_init(units: int) -> keras.initializers.Initializer:
    """torch's RNN/LSTM/GRU init, U(-1/sqrt(hidden), 1/sqrt(hidden)) for every tensor.

    Keras' defaults (glorot kernels, orthogonal recurrent kernels, LSTM forget bias 1)
    make a different starting point, and measurably slower character models here; the
    twins start from the same distribution instead (and bfloat16 has no QR for
    orthogonal init).
    """
    bound = 1.0 / math.sqrt(units)
    return keras.initializers.RandomUniform(-bound, bound)


class BatchNorm(keras.layers.Layer):
    """BatchNorm over the last axis with torch's semantics.

    Normalises with the biased batch variance, updates the running variance with the
    unbiased one, weighs the new batch by ``momentum`` (torch convention) and counts
    batches in ``num_batches_tracked``, so a torch ``BatchNorm2d`` state round-trips.

    In training it refuses a batch with one value per channel (a batch of 1 with 1x1 maps:
    its variance says nothing) with the torch twin's :class:`zoo.nn.errors.InputError`,
    where Keras' own would go on silently. Only shapes are checked: where the static shape
    settles it, at trace time; where the batch size is known only when the graph runs, by
    an assertion on the shape (host-side, no device synchronisation).
    """

    def __init__(self, momentum: float = 0.1, epsilon: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum
        self.epsilon = epsilon

    def build(self, input_shape):
        channels = (int(input_shape[-1]),)
        self.gamma = self.add_weight(shape=channels, initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=channels, initializer="zeros", name="beta")
        # Under a tf.distribute strategy each replica updates the statistics from its own
        # batch (as torch DDP does without SyncBatchNorm); the aggregation says how to merge.
        self.moving_mean = self.add_weight(
            shape=channels, initializer="zeros", trainable=False, name="moving_mean", aggregation="mean"
        )
        self.moving_variance = self.add_weight(
            shape=channels, initializer="ones", trainable=False, name="moving_variance", aggregation="mean"
        )
        self.num_batches_tracked = self.add_weight(
            shape=(),
            initializer="zeros",
            dtype="int64",
            trainable=False,
            name="num_batches_tracked",
            aggregation="only_first_replica",
        )

    def call(self, x, training=False):
        # Statistics in float32 at least (float64 under a float64 policy), as torch does.
        dtype = "float64" if self.variable_dtype == "float64" else "float32"
        x_ = ops.cast(x, dtype)
        axes = list(range(len(x.shape) - 1))
        if training and self.trainable:  # a frozen BatchNorm is in inference mode (Keras' convention)
            x_ = _with_values_per_channel(x_)
            mean = ops.mean(x_, axis=axes)
            variance = ops.var(x_, axis=axes)
            count = math.prod(x.shape[a] for a in axes[1:]) * ops.cast(ops.shape(x)[0], dtype)
            unbiased = variance * count / ops.maximum(count - 1.0, 1.0)
            m = self.momentum
            for stat, batch in ((self.moving_mean, mean), (self.moving_variance, unbiased)):
                stat.assign(ops.cast(ops.cast(stat, dtype) * (1 - m) + batch * m, stat.dtype))
            self.num_batches_tracked.assign_add(ops.cast(1, "int64"))
        else:
            mean, variance = (ops.cast(v, dtype) for v in (self.moving_mean, self.moving_variance))
        gamma, beta = ops.cast(self.gamma, dtype), ops.cast(self.beta, dtype)
        y = (x_ - mean) * ops.rsqrt(variance + self.epsilon) * gamma + beta
        return ops.cast(y, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "epsilon": self.epsilon}


def _with_values_per_channel(x):
    """``x`` (N, ..., C), checked to hold more than one value per channel, as torch's BatchNorm requires."""
    sizes = x.shape[:-1]  # the batch and the spatial sizes
    if any(size is not None and size > 1 for size in sizes):
        return x
    message = batchnorm_message(len(sizes) - 1)
    if all(size is not None for size in sizes):  # every size is 1
        raise InputError(message)
    return require(ops.prod(ops.shape(x)[:-1]) > 1, message, x)
