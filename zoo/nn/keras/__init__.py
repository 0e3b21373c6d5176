"""zoo's shared building blocks as Keras 3 layers on TensorFlow (the torch twins are in ``zoo.nn.torch``)."""

from zoo.nn.keras.attention import SelfAttention, blocked_mask
from zoo.nn.keras.checks import require
from zoo.nn.keras.drop import DropPath
from zoo.nn.keras.embedding import Embedding, checked_token_ids
from zoo.nn.keras.linear import Conv2D, Dense, DepthwiseConv2D, add_bias
from zoo.nn.keras.mlp import Mlp
from zoo.nn.keras.norm import LayerNorm

__all__ = [
    "Conv2D",
    "Dense",
    "DepthwiseConv2D",
    "DropPath",
    "Embedding",
    "LayerNorm",
    "Mlp",
    "SelfAttention",
    "add_bias",
    "blocked_mask",
    "checked_token_ids",
    "require",
]
