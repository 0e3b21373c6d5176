"""Activations by the names configs use, computed as torch computes them (``keras.ops.gelu``
defaults to the tanh approximation; torch's ``GELU`` is exact)."""

from __future__ import annotations

import functools

import keras

ACTIVATIONS = {
    "relu": keras.activations.relu,
    "gelu": functools.partial(keras.activations.gelu, approximate=False),
    "gelu_tanh": functools.partial(keras.activations.gelu, approximate=True),
    "silu": keras.activations.silu,
    "tanh": keras.activations.tanh,
}


def activation(name: str):
    return ACTIVATIONS[name]


def softcap(x, cap: float):
    """``cap * tanh(x / cap)`` (Gemma's logit softcaps), the torch twin's, with torch's gradient
    ``1 - t^2`` for a ``t`` rounded as torch's tanh is. TensorFlow's float32 tanh is exactly 1 from
    ``x / cap = 8`` on, where torch's keeps 1 - 1 ulp to about 9: from its own tanh the gradient
    would be 0 in Keras alone there, and every gradient behind a saturated softcap would differ
    from torch's by the whole of its share (measured: 3e-3 of the largest gradient of a Gemma whose
    logits reach that far, its float64 twins agreeing). ``t = 1 - 2e / (1 + e)`` with
    ``e = exp(-2 |x / cap|)`` is the tanh rounded once in the dtype, as torch's is, to 1 only where
    torch's is too."""
    c = keras.ops.convert_to_tensor(cap, dtype=x.dtype)

    @keras.ops.custom_gradient
    def capped(x):
        z = keras.ops.divide(x, c)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            e = keras.ops.exp(keras.ops.multiply(keras.ops.abs(z), -2.0))
            t = 1.0 - keras.ops.divide(2.0 * e, 1.0 + e)
            return keras.ops.multiply(upstream, 1.0 - keras.ops.square(t))

        return keras.ops.multiply(keras.ops.tanh(z), c), grad

    return capped(x)
