"""Normalisation layers computed as torch computes them.

Keras' BatchNormalization keeps a biased running variance (torch's is unbiased) and weighs
momentum the other way: :class:`BatchNorm` follows torch.
"""

from __future__ import annotations

import math

import keras
from keras import layers, ops

from zoo.nn.errors import InputError, batchnorm_message
from zoo.nn.keras.checks import require


@keras.saving.register_keras_serializable(package="zoo")
class LayerNorm(layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` (same ``gamma``/``beta``) computed in torch's order,
    ``(x - mean) * rsqrt(var + eps) * gamma + beta``, in float32 at least.

    Keras folds the mean into a bias, ``x * inv + (beta - mean * inv)``, and the two large
    products cancel: at BERT's epsilon 1e-12 ``inv`` reaches 1e6 on rows of small variance. Over
    rows of 1, 2 and 32 features (normal inputs) Keras' form is 8.6e-3, 1.0e-5 and 9.5e-7 from
    torch's ``layer_norm``, this one 0, 3.0e-6 and 4.8e-7.
    """

    def call(self, inputs):
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        mean, variance = ops.moments(x, axes=self.axis, keepdims=True)
        y = (x - mean) * ops.rsqrt(variance + self.epsilon)
        y = y * ops.cast(self.gamma, dtype) + ops.cast(self.beta, dtype)
        return ops.cast(y, self.compute_dtype)


@keras.saving.register_keras_serializable(package="zoo")
class RMSNorm(layers.Layer):
    """``zoo.nn.torch.RMSNorm`` (transformers' ``LlamaRMSNorm``): one ``scale`` variable, the
    normalisation in float32 at least, cast to the compute dtype before the scale."""

    def __init__(self, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

    def call(self, inputs):
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        normed = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        # Back to the input's dtype first, as transformers (the same as the compute dtype but
        # where a layer built with autocast=False reads a lower-precision input).
        normed = ops.cast(ops.cast(normed, inputs.dtype), self.compute_dtype)
        return ops.cast(self.scale, self.compute_dtype) * normed

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package="zoo")
class OffsetRMSNorm(RMSNorm):
    """``zoo.nn.torch.OffsetRMSNorm`` (Gemma's RMSNorm): scaled by ``1 + scale`` (``scale`` starts
    at zero) in float32, then cast to the input's dtype, where :class:`RMSNorm` casts first."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="scale")

    def call(self, inputs):
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        normed = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        scaled = normed * (1.0 + ops.cast(self.scale, dtype))
        return ops.cast(ops.cast(scaled, inputs.dtype), self.compute_dtype)


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
