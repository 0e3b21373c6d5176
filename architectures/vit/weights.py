"""The ViT weight table: torch ``state_dict`` names <-> Keras variables, in ``state_dict`` order.

The class token and the position embedding are parameters of the torch model itself (timm's
names, first in its ``state_dict``); the Keras twin keeps both in one small layer, ``tokens``.
"""

from __future__ import annotations

import numpy as np

from architectures.vit.config import ViTConfig
from zoo.checkpoint.tables import Arrays, Port, TensorSpec, conv2d, dense, layernorm
from zoo.nn.ports import mlp, self_attention


def _same(*arrays: np.ndarray) -> Arrays:
    return tuple(arrays)


def tokens(cfg: ViTConfig) -> Port:
    """``cls_token`` (1, 1, dim) and ``pos_embed`` (1, 1 + patches, dim): the same arrays in both twins."""
    return Port(
        (TensorSpec("cls_token", (1, 1, cfg.dim)), TensorSpec("pos_embed", (1, cfg.num_tokens, cfg.dim))),
        "tokens",
        ("cls_token", "pos_embed"),
        _same,
        _same,
    )


def _block(name: str, cfg: ViTConfig) -> list[Port]:
    d = cfg.dim
    return [
        layernorm(f"{name}.norm1", d),
        self_attention(f"{name}.attn", d),
        layernorm(f"{name}.norm2", d),
        *mlp(f"{name}.mlp", d, cfg.mlp_hidden),
    ]


def table(cfg: ViTConfig) -> list[Port]:
    ports = [tokens(cfg), conv2d("patch_embed.proj", cfg.in_channels, cfg.dim, cfg.patch_size)]
    for i in range(cfg.depth):
        ports += _block(f"blocks.{i}", cfg)
    return [*ports, layernorm("norm", cfg.dim), dense("head", cfg.dim, cfg.num_classes)]
