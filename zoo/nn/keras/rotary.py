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


def rotary_tables(positions, inv_freq: np.ndarray, dtype):
    """(N, T) integer positions -> cosines and sines (N, T, head_dim) in ``dtype``."""
    wide = "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    angles = ops.cast(positions, wide)[..., None] * ops.convert_to_tensor(inv_freq, dtype=wide)
    angles = ops.concatenate([angles, angles], axis=-1)
    return ops.cast(ops.cos(angles), dtype), ops.cast(ops.sin(angles), dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(x, cos, sin):
    """(N, heads, T, head_dim) turned by the (N, T, head_dim) tables."""
    dtype = keras.backend.result_type(x.dtype, cos.dtype)
    x, cos, sin = ops.cast(x, dtype), ops.cast(cos, dtype)[:, None], ops.cast(sin, dtype)[:, None]
    return x * cos + rotate_half(x) * sin
