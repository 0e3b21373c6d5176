"""Stochastic depth (drop path): a residual branch dropped for whole samples in training.

torchvision's ``StochasticDepth(p, "row")`` and timm's ``DropPath(p)`` compute the same thing:
each sample's branch is kept with probability 1 - p and then scaled by 1 / (1 - p), so its
expectation is unchanged; in evaluation it is the identity. The Keras twin
(``zoo.nn.keras.DropPath``) is a Keras ``Dropout`` with one mask value per sample, so
gradient checkpointing replays its mask as it replays any dropout's (``zoo.nn.keras.remat``).
"""

from __future__ import annotations

import torch
from torch import nn


class DropPath(nn.Module):
    """``x`` with each sample's values zeroed with probability ``rate`` (training only), the
    kept ones scaled by 1 / (1 - rate): one Bernoulli draw per sample, as timm draws it."""

    def __init__(self, rate: float = 0.0):
        super().__init__()
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"a drop path rate is a probability in [0, 1); got {rate}")
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask.div_(keep)

    def extra_repr(self) -> str:
        return f"rate={self.rate}"
