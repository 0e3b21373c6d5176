"""BatchNorm that refuses a training batch with one value per channel in the Keras twin's words."""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo.nn.errors import InputError, batchnorm_message


class BatchNorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` (same tensors, same state_dict) with zoo's message for a batch of 1
    with 1x1 maps in training, where torch's own is a different ``ValueError`` than the Keras
    twin's. The check reads shapes only: no host synchronisation, nothing for
    ``torch.compile`` to break on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] * math.prod(x.shape[2:]) == 1:
            raise InputError(batchnorm_message(x.dim() - 2))
        return super().forward(x)
