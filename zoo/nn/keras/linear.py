"""Keras' Dense, Conv2D and DepthwiseConv2D with the bias added in float32: the products of zoo's Keras twins.

Under mixed precision TensorFlow adds a 1-D bias with ``BiasAdd``, and on the CPU the
gradient of a bfloat16 ``BiasAdd`` (a sum over every row of the batch, and every time step
of a sequence) is accumulated in bfloat16: 6.6 % off over 4,096 rows, where torch's sum,
and ``tf.reduce_sum``, are off only by the final rounding (0.18 %; docs/precision.md).
A language model's head bias came out 56 % off. Here the product runs in the layer's
compute dtype and the bias is added in float32 (float64 stays float64), so its gradient
is a float32 sum as in torch; the output is rounded back to the compute dtype, as torch's
autocast returns a low-precision product. At float32 the casts are no-ops.
"""

from __future__ import annotations

import keras
from keras import ops


def add_bias(y, bias):
    """``y + bias`` summed in float32 at least, returned in ``y``'s dtype."""
    dtype = y.dtype
    wide = "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    return ops.cast(ops.add(ops.cast(y, wide), ops.cast(bias, wide)), dtype)


@keras.saving.register_keras_serializable(package="zoo")
class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` (no quantisation, not Keras' own LoRA) with :func:`add_bias`.
    ``lora_adapter`` is zoo's (zoo.lora.keras_lora): its output is added to the product, as
    PEFT adds to a Linear's."""

    lora_adapter = None

    def call(self, inputs, training=None):
        y = ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            y = add_bias(y, self.bias)
        if self.lora_adapter is not None:
            y = y + self.lora_adapter(inputs, training=training)
        return y if self.activation is None else self.activation(y)


@keras.saving.register_keras_serializable(package="zoo")
class Conv2D(keras.layers.Conv2D):
    """``keras.layers.Conv2D`` (channels last) with :func:`add_bias`.

    A 1x1 convolution with stride s and "valid" padding (a ResNet shortcut) runs as the pixels
    it reads, ``x[:, ::s, ::s]``, through a stride-1 convolution: the same products summed in
    the same order. TensorFlow 2.21's oneDNN filter gradient of the strided 1x1 kernel corrupts
    the heap for some shapes (a (2, 56, 56, 8) input, 8 outputs, stride 2 aborted every run
    with "double free or corruption"; none with TF_ENABLE_ONEDNN_OPTS=0).
    """

    def convolution_op(self, inputs, kernel):
        strided = self.strides != (1, 1) and self.kernel_size == (1, 1) and self.padding == "valid"
        if strided and self.dilation_rate == (1, 1) and self.data_format == "channels_last":
            sh, sw = self.strides
            return ops.conv(inputs[:, ::sh, ::sw, :], kernel, strides=1, padding="valid")
        return super().convolution_op(inputs, kernel)

    def call(self, inputs):
        y = self.convolution_op(inputs, self.kernel)
        if self.use_bias:
            y = add_bias(y, self.bias)
        return y if self.activation is None else self.activation(y)


@keras.saving.register_keras_serializable(package="zoo")
class DepthwiseConv2D(keras.layers.DepthwiseConv2D):
    """``keras.layers.DepthwiseConv2D`` (channels last) with :func:`add_bias`: torch's
    ``nn.Conv2d(C, C * m, k, groups=C)``, its (C * m, 1, k, k) weight a (k, k, C, m) kernel."""

    def call(self, inputs):
        y = ops.depthwise_conv(
            inputs,
            self.kernel,
            strides=self.strides,
            padding=self.padding,
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
        )
        if self.use_bias:
            y = add_bias(y, self.bias)
        return y if self.activation is None else self.activation(y)
