"""zoo's shared building blocks as Keras 3 layers on TensorFlow (the torch twins are in ``zoo.nn.torch``)."""

from zoo.nn.keras.attention import GroupedQueryAttention, SelfAttention, blocked_mask
from zoo.nn.keras.checks import require
from zoo.nn.keras.drop import DropPath
from zoo.nn.keras.embedding import Embedding, PaddedEmbedding, checked_token_ids
from zoo.nn.keras.linear import Conv2D, Dense, DepthwiseConv2D, add_bias
from zoo.nn.keras.mlp import GatedMlp, Mlp
from zoo.nn.keras.norm import LayerNorm, OffsetRMSNorm, RMSNorm

__all__ = [
    "Conv2D",
    "Dense",
    "DepthwiseConv2D",
    "DropPath",
    "Embedding",
    "GatedMlp",
    "GroupedQueryAttention",
    "LayerNorm",
    "Mlp",
    "OffsetRMSNorm",
    "PaddedEmbedding",
    "RMSNorm",
    "SelfAttention",
    "add_bias",
    "blocked_mask",
    "checked_token_ids",
    "require",
]
