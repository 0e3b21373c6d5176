"""Normalisation layers computed as torch computes them."""

from __future__ import annotations

import keras
from keras import layers, ops


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
        return ops.cast(self.scale, self.compute_dtype) * ops.cast(normed, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}
