"""The batch order: a pure function of (seed, epoch), identical for every framework.

Both twins draw their batches from here, which is what makes cross-framework
comparison and exact resumption possible: batch ``i`` of epoch ``e`` is the same
samples whoever asks, in whatever process.
"""

from __future__ import annotations

import math

import numpy as np


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(n).astype(np.int64)


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, shuffle: bool = True) -> list[np.ndarray]:
    """Index arrays of every batch of one epoch; the last one may be smaller."""
    order = epoch_order(n, seed, epoch, shuffle)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def steps_per_epoch(n: int, batch_size: int) -> int:
    return math.ceil(n / batch_size)
