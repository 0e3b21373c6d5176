"""Masked language modeling's masks, drawn from the seeded batch order.

A sample's masks are a pure function of (seed, epoch, sample index), like an image's
augmentation: both frameworks mask the same positions of the same batch, and a resumed run
masks as the uninterrupted one would. Validation and test samples use epoch -1: the same
masks every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo.data.dataset import IGNORE_INDEX


@dataclass(frozen=True)
class Masking:
    """BERT's scheme: each ordinary token is chosen with ``probability``; a chosen token is
    replaced by [MASK] 80% of the time, by a random token 10%, kept 10%; only chosen tokens
    have labels (the rest are ``IGNORE_INDEX``)."""

    probability: float
    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...] = ()
    fixed: bool = False  # validation and test: the masks of epoch -1, whatever the epoch

    def apply(
        self, ids: np.ndarray, index: np.ndarray, seed: int, epoch: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, labels) for the rows ``ids`` of samples ``index``."""
        epoch = -1 if self.fixed else int(epoch)
        inputs = np.array(ids, dtype=np.int64, copy=True)
        labels = np.full_like(inputs, IGNORE_INDEX)
        special = np.isin(inputs, np.asarray(self.special_ids, dtype=np.int64))
        steps = inputs.shape[1]
        for row, sample in enumerate(np.asarray(index).tolist()):
            rng = np.random.default_rng([seed, epoch + 1, int(sample)])
            chosen = (rng.random(steps) < self.probability) & ~special[row]
            action = rng.random(steps)
            random_tokens = rng.integers(0, self.vocab_size, steps, dtype=np.int64)
            labels[row, chosen] = inputs[row, chosen]
            to_mask = chosen & (action < 0.8)
            to_random = chosen & (action >= 0.8) & (action < 0.9)
            inputs[row, to_mask] = self.mask_id
            inputs[row, to_random] = random_tokens[to_random]
        return inputs, labels
