"""Normalisation layers: BatchNorm that refuses a training batch with one value per channel in the
Keras twin's words, LayerNorm in float32 under autocast on every device (and over the channels of a
channels-first map), and transformers' two RMSNorms (Llama's, and Gemma's scale of one plus the weight)."""

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


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` (same tensors, same state_dict) that normalises in float32 under autocast,
    on the CPU as CUDA's autocast does (``layer_norm`` is on its float32 list: input cast up, a
    float32 output). CPU autocast has it on neither list, so a bfloat16 input, a convolution's
    output in ConvNeXt, came out bfloat16 and its weight and bias gradients were summed in
    bfloat16: 2.0e-2 off over 2,048 rows, where a float32 sum of the same bfloat16 output
    gradients is exact to 1e-7 (docs/precision.md keeps normalisation in float32). Outside
    autocast (float32, or every tensor bfloat16 under "bf16-true") it is ``nn.LayerNorm``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in (torch.bfloat16, torch.float16) and torch.is_autocast_enabled(x.device.type):
            x = x.float()
        return super().forward(x)


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) map: torchvision's and timm's
    ``LayerNorm2d`` (ConvNeXt's stem, downsampling layers and head), the same tensors as
    ``nn.LayerNorm(C)``. The map is normalised channels last and handed back channels first,
    as both libraries do, so the sums run in their order. The Keras twin is a plain LayerNorm
    over the last axis of its (N, H, W, C) map."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


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


class OffsetRMSNorm(RMSNorm):
    """Gemma's RMSNorm (transformers' ``Gemma3RMSNorm``, Gemma 2's too): the same normalisation,
    scaled by ``1 + weight`` (the weight starts at zero) in float32 and only then cast back to the
    input's dtype, where :class:`RMSNorm` casts first. The two orders round differently in
    bfloat16, so each family keeps its own."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__(features, eps)
        nn.init.zeros_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.to(wide.dtype))).to(x.dtype)
