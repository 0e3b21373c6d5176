"""Initialisers that draw as torch's modules draw where Keras' defaults differ."""

from __future__ import annotations

import math

import keras


def torch_recurrent_init(units: int) -> keras.initializers.Initializer:
    """torch's RNN/LSTM/GRU init, U(-1/sqrt(hidden), 1/sqrt(hidden)) for every tensor.

    Keras' defaults (glorot kernels, orthogonal recurrent kernels, LSTM forget bias 1)
    make a different starting point, and measurably slower character models here; the
    twins start from the same distribution instead (and bfloat16 has no QR for
    orthogonal init).
    """
    bound = 1.0 / math.sqrt(units)
    return keras.initializers.RandomUniform(-bound, bound)
