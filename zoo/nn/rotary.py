"""Rotary position embeddings (RoPE): the rotation frequencies, computed once in numpy for both twins.

A rotary model turns each (query, key) feature pair by an angle of ``position * frequency``.
transformers computes the frequencies in float32 torch arithmetic when it builds a model; here
they are the same float32 steps in numpy, and both twins read this one array. Angles grow with
the position (Llama 3.2 reads 131,072 tokens), so frequencies that differ in their last bit
would turn keys by visibly different angles far into a sequence: the twins must not compute
them each in their own framework.

Three ways to derive them, transformers' ``rope_type`` values:

- ``default``: ``1 / theta ** (2i / head_dim)`` for i in [0, head_dim / 2);
- ``linear`` (Gemma 3's global layers): the default frequencies divided by ``factor``;
- ``llama3`` (Llama 3.1 / 3.2): the default frequencies, divided by ``factor`` where the
  wavelength is longer than ``original_max_position_embeddings / low_freq_factor``, kept where
  it is shorter than ``original_max_position_embeddings / high_freq_factor``, and blended
  smoothly in between (``_compute_llama3_parameters`` in transformers' ``modeling_rope_utils``).

None of these scales the cosines and sines (transformers' ``attention_factor`` is 1 for them).
Phi-3's ``longrope`` (its 128k models) is :class:`LongRope`: two sets of frequencies, each the
default's divided by a factor per frequency, the long set used for a forward whose positions
reach past ``original_max_position_embeddings``, and the cosines and sines scaled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

ROPE_TYPES = ("default", "linear", "llama3")


def inverse_frequencies(head_dim: int, theta: float, scaling: Mapping[str, Any] | None = None) -> np.ndarray:
    """(head_dim / 2,) float32 rotation frequencies. ``scaling`` is a ``llama3`` rope_scaling
    mapping (transformers' keys: ``factor``, ``low_freq_factor``, ``high_freq_factor``,
    ``original_max_position_embeddings``), a ``linear`` one (``factor``), or None for the
    default ones."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings turn feature pairs: head_dim {head_dim} must be even")
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    inv_freq = np.float32(1.0) / np.power(np.float32(theta), exponents, dtype=np.float32)
    if scaling is None:
        return inv_freq
    if scaling.get("rope_type") == "linear":  # transformers divides the float32 frequencies
        return (inv_freq / np.float32(scaling["factor"])).astype(np.float32)
    if scaling.get("rope_type", "llama3") != "llama3":
        raise ValueError(f"rope_type {scaling['rope_type']!r} is not one of: {', '.join(ROPE_TYPES)}")
    factor = np.float32(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_context = float(scaling["original_max_position_embeddings"])
    wavelength = np.float32(2 * math.pi) / inv_freq
    scaled = np.where(wavelength > old_context / low, inv_freq / factor, inv_freq).astype(np.float32)
    smooth = (np.float32(old_context) / wavelength - np.float32(low)) / np.float32(high - low)
    smoothed = (np.float32(1) - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelength < old_context / high) & ~(wavelength > old_context / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)


@dataclass(frozen=True)
class LongRope:
    """transformers' ``longrope`` (``_compute_longrope_parameters`` and ``longrope_frequency_update``):
    a forward whose largest position + 1 exceeds ``original`` turns by ``long``, any other by
    ``short``; both tables are multiplied by ``scale`` (the ``attention_factor``)."""

    short: np.ndarray
    long: np.ndarray
    original: int
    scale: float


def longrope(
    head_dim: int,
    theta: float,
    short_factor: Sequence[float],
    long_factor: Sequence[float],
    original: int,
    context: int,
    factor: float | None = None,
    attention_factor: float | None = None,
) -> LongRope:
    """:class:`LongRope` from a ``rope_scaling`` of type ``longrope``, in transformers' float32
    steps: ``1 / (factors * theta ** (2i / head_dim))``; the scale, where not given,
    ``sqrt(1 + log(factor) / log(original))`` with ``factor`` context / original by default."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    powers = np.power(np.float32(theta), exponents, dtype=np.float32)

    def frequencies(factors: Sequence[float]) -> np.ndarray:
        return (np.float32(1.0) / (np.asarray(factors, dtype=np.float32) * powers)).astype(np.float32)

    factor = context / original if factor is None else factor
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return LongRope(frequencies(short_factor), frequencies(long_factor), original, attention_factor)
