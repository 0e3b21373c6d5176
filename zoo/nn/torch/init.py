"""Initialisers the reference libraries use that torch's own ``nn.init`` draws differently, and
transformers' ``_init_weights`` for its decoders."""

from __future__ import annotations

import math

import torch
from torch import nn


def trunc_normal_(tensor: torch.Tensor, std: float, a: float = -2.0, b: float = 2.0) -> torch.Tensor:
    """timm's ``trunc_normal_``: N(0, std^2) cut at [a, b] (absolute: +-2 is 100 std out at std
    0.02, so in effect a normal), drawn by the inverse CDF of one uniform draw per value.

    Not ``nn.init.trunc_normal_``: torch 2.x draws by rejection from ``normal_``, other values
    for the same seed (the distribution is the same). timm's ViT and ConvNeXt initialise with
    this one, so a twin that uses it after ``torch.manual_seed(s)`` holds timm's tensors."""
    low, high = (0.5 * (1.0 + math.erf(bound / std / math.sqrt(2.0))) for bound in (a, b))
    tensor.uniform_(2 * low - 1, 2 * high - 1)
    tensor.erfinv_()
    tensor.mul_(std * math.sqrt(2.0))
    tensor.add_(0.0)  # timm adds the mean: a -0.0 becomes 0.0, bit for bit as there
    return tensor.clamp_(min=a, max=b)


@torch.no_grad()
def transformers_init_(model: nn.Module, std: float, embedding: nn.Embedding) -> None:
    """transformers' ``PreTrainedModel._init_weights`` for a decoder (Llama's, Gemma's): normal(0,
    std) for every Linear and Embedding, zero Linear biases, the embedding's padding row zero;
    norms keep their own initial weights."""
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    if embedding.padding_idx is not None:
        embedding.weight[embedding.padding_idx].zero_()
