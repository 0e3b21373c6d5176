"""Keras' Dense, Conv2D and DepthwiseConv2D with the bias added in float32: the products of zoo's Keras twins.

Under mixed precision TensorFlow adds a 1-D bias with ``BiasAdd``, and on the CPU the
gradient of a bfloat16 ``BiasAdd`` (a sum over every row of the batch, and every time step
of a sequence) is accumulated in bfloat16: 6.6 % off over 4,096 rows, where torch's sum,
and ``tf.reduce_sum``, are off only by the final rounding (0.18 %; docs/precision.md).
A language model's head bias came out 56 % off. Here the product runs in the layer's
compute dtype and the bias is added in float32 (float64 stays float64), so its gradient
is a float32 sum as in torch; the output is rounded back to the compute dtype, as torch's
autocast returns a low-precision product. At float32 the casts are no-ops.

On the CPU, TensorFlow's low-precision convolution kernels do not sum in float32 either (a
bfloat16 ``Conv2DBackpropFilter`` over 512 positions is 2.6e-2 off, torch's 6.9e-3; its
``Conv2DBackpropInput`` 7.2e-3, torch's one rounding 1.7e-3; the depthwise forward 6.9e-3): there
zoo's convolutions run in float32 on the low-precision operands, rounded once
(:func:`float32_sums`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import keras
import tensorflow as tf
from keras import ops

LOW_PRECISION = ("bfloat16", "float16")


def add_bias(y, bias):
    """``y + bias`` summed in float32 at least, returned in ``y``'s dtype."""
    dtype = y.dtype
    wide = "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    return ops.cast(ops.add(ops.cast(y, wide), ops.cast(bias, wide)), dtype)


@functools.cache
def _tensorflow_on_cpu() -> bool:
    """Whether TensorFlow runs this process's operations on the CPU: it sees no GPU. Asked when a
    layer first runs, after the runtime started, when its devices can no longer change."""
    return not tf.config.list_logical_devices("GPU")


def float32_sums(convolve: Callable, inputs, kernel):
    """``convolve(inputs, kernel)`` as zoo's mixed rule means a low-precision product
    (docs/precision.md): the operands rounded, every sum in float32, the output rounded once.

    TensorFlow's CPU kernels sum a bfloat16 convolution partly in bfloat16, in the forward pass
    (depthwise) and in both gradients, 4x to 16x one rounding. On the CPU the convolution
    therefore runs in float32 on the low-precision operands (each product of two bfloat16 values
    is exact in float32) and the casts around it round the output and, in backward, both
    gradients once to nearest, as torch rounds a convolution's output. Where TensorFlow sees a
    GPU its own kernels run (cuDNN's; not measured against this rule). On a CPU without bfloat16
    instructions the float32 convolution is also the faster one (docs/precision.md).
    """
    dtype = keras.backend.standardize_dtype(inputs.dtype)
    if dtype not in LOW_PRECISION or not _tensorflow_on_cpu():
        return convolve(inputs, kernel)
    return ops.cast(convolve(ops.cast(inputs, "float32"), ops.cast(kernel, "float32")), dtype)


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
    """``keras.layers.Conv2D`` (channels last) with :func:`add_bias`, summed in float32 on the CPU
    (:func:`float32_sums`).

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
        y = float32_sums(self.convolution_op, inputs, self.kernel)
        if self.use_bias:
            y = add_bias(y, self.bias)
        return y if self.activation is None else self.activation(y)


@keras.saving.register_keras_serializable(package="zoo")
class DepthwiseConv2D(keras.layers.DepthwiseConv2D):
    """``keras.layers.DepthwiseConv2D`` (channels last) with :func:`add_bias`, summed in float32 on
    the CPU (:func:`float32_sums`): torch's ``nn.Conv2d(C, C * m, k, groups=C)``, its
    (C * m, 1, k, k) weight a (k, k, C, m) kernel."""

    def call(self, inputs):
        convolve = functools.partial(
            ops.depthwise_conv,
            strides=self.strides,
            padding=self.padding,
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
        )
        y = float32_sums(convolve, inputs, self.kernel)
        if self.use_bias:
            y = add_bias(y, self.bias)
        return y if self.activation is None else self.activation(y)
