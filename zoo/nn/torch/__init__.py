"""zoo's shared building blocks as torch modules (the Keras twins are in ``zoo.nn.keras``)."""

from zoo.nn.torch.attention import GroupedQueryAttention, SelfAttention, blocked_mask
from zoo.nn.torch.drop import DropPath
from zoo.nn.torch.embedding import Embedding, check_token_ids
from zoo.nn.torch.mlp import GatedMlp, Mlp
from zoo.nn.torch.norm import BatchNorm2d, LayerNorm, LayerNorm2d, OffsetRMSNorm, RMSNorm

__all__ = [
    "BatchNorm2d",
    "DropPath",
    "Embedding",
    "GatedMlp",
    "GroupedQueryAttention",
    "LayerNorm",
    "LayerNorm2d",
    "Mlp",
    "OffsetRMSNorm",
    "RMSNorm",
    "SelfAttention",
    "blocked_mask",
    "check_token_ids",
]
