"""Normalisation layers: BatchNorm that refuses a training batch with one value per channel in the
Keras twin's words, LayerNorm over the channels of a channels-first map, and transformers' RMSNorm."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
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


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) map: torchvision's and timm's
    ``LayerNorm2d`` (ConvNeXt's stem, downsampling layers and head), the same tensors as
    ``nn.LayerNorm(C)``. The map is normalised channels last and handed back channels first,
    as both libraries do, so the sums run in their order. The Keras twin is a plain LayerNorm
    over the last axis of its (N, H, W, C) map."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned scale, transformers' ``LlamaRMSNorm``
    (T5's LayerNorm): ``weight * (x / sqrt(mean(x^2) + eps))``, the normalisation in float32 at
    least (float64 stays float64), cast back to the input's dtype before the scale. Not
    ``nn.RMSNorm``: transformers scales after the cast, which a bfloat16 model rounds differently."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"
