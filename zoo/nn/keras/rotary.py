"""Rotary position embeddings, the twin of ``zoo.nn.torch.rotary`` step for step.

The angles in float32 (float64 in a float64 model) from ``zoo.nn.rotary``'s shared frequencies,
their cosines and sines in the hidden states' dtype, and ``x * cos + rotate_half(x) * sin`` in
the wider of the two dtypes (torch's type promotion: a bfloat16 projection under mixed precision
meets float32 tables).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from zoo.nn.rotary import LongRope


def rotary_tables(positions, inv_freq: np.ndarray | LongRope, dtype):
    """(N, T) integer positions -> cosines and sines (N, T, head_dim) in ``dtype``; with a
    :class:`~zoo.nn.rotary.LongRope`, the long or the short table by the largest position, scaled."""
    if isinstance(inv_freq, LongRope):
        short = _tables(positions, inv_freq.short, dtype, inv_freq.scale)
        long = _tables(positions, inv_freq.long, dtype, inv_freq.scale)
        beyond = ops.max(positions) + 1 > inv_freq.original
        return ops.where(beyond, long[0], short[0]), ops.where(beyond, long[1], short[1])
    return _tables(positions, inv_freq, dtype)


def _tables(positions, inv_freq: np.ndarray, dtype, scale: float = 1.0):
    wide = "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    angles = ops.cast(positions, wide)[..., None] * ops.convert_to_tensor(inv_freq, dtype=wide)
    angles = ops.concatenate([angles, angles], axis=-1)
    cos, sin = ops.cos(angles), ops.sin(angles)
    if scale != 1.0:
        cos, sin = cos * ops.convert_to_tensor(scale, wide), sin * ops.convert_to_tensor(scale, wide)
    return ops.cast(cos, dtype), ops.cast(sin, dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(x, cos, sin):
    """(N, heads, T, head_dim) turned by the (N, T, head_dim) tables."""
    dtype = keras.backend.result_type(x.dtype, cos.dtype)
    x, cos, sin = ops.cast(x, dtype), ops.cast(cos, dtype)[:, None], ops.cast(sin, dtype)[:, None]
    return x * cos + rotate_half(x) * sin
