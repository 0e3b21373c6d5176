"""Rotary position embeddings applied to queries and keys (torch; the Keras twin: ``zoo.nn.keras.rotary``).

transformers' arithmetic step for step: the angles ``position * frequency`` in float32 (also
under autocast; a float64 model keeps float64, as zoo's softmax and norms do, where transformers
rounds them to float32), their cosines and sines in the hidden states' dtype, and
``x * cos + rotate_half(x) * sin`` on each head, where ``rotate_half`` swaps the two halves of
the head's features and negates the second. The frequencies are ``zoo.nn.rotary``'s numpy
array, shared with the Keras twin.
"""

from __future__ import annotations

import numpy as np
import torch

from zoo.nn.rotary import LongRope


def rotary_tables(
    positions: torch.Tensor, inv_freq: np.ndarray | LongRope, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) integer positions -> cosines and sines (N, T, head_dim) in ``dtype``; with a
    :class:`~zoo.nn.rotary.LongRope`, the long or the short table by the largest position, scaled."""
    if isinstance(inv_freq, LongRope):
        short = _tables(positions, inv_freq.short, dtype, inv_freq.scale)
        long = _tables(positions, inv_freq.long, dtype, inv_freq.scale)
        beyond = positions.max() + 1 > inv_freq.original  # a tensor: no host synchronisation
        return torch.where(beyond, long[0], short[0]), torch.where(beyond, long[1], short[1])
    return _tables(positions, inv_freq, dtype)


def _tables(positions: torch.Tensor, inv_freq: np.ndarray, dtype: torch.dtype, scale: float = 1.0):
    wide = torch.promote_types(dtype, torch.float32)
    frequencies = torch.from_numpy(inv_freq).to(positions.device, wide)
    with torch.autocast(positions.device.type, enabled=False):
        angles = positions.to(wide)[..., None] * frequencies
        angles = torch.cat((angles, angles), dim=-1)
        if scale == 1.0:
            return angles.cos().to(dtype), angles.sin().to(dtype)
        return (angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(N, heads, T, head_dim) turned by the (N, T, head_dim) tables (type promotion decides the
    dtype, as in transformers: a bfloat16 projection under autocast meets float32 tables)."""
    cos, sin = cos[:, None], sin[:, None]
    return x * cos + rotate_half(x) * sin
