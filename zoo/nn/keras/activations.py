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
