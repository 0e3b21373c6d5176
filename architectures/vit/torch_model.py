"""The ViT family's torch twin: timm's ``VisionTransformer`` (``vit_*_patch16_224``), written out.

Same tensors and names as timm's, except attention: zoo's shared ``SelfAttention`` keeps
``nn.MultiheadAttention``'s names (``attn.in_proj_weight`` is timm's ``attn.qkv.weight``,
``attn.out_proj`` timm's ``attn.proj``; ``architectures.vit.formats`` renames). It computes
what timm's attention computes, spelled out so that the Keras twin can round at the same
places. Initialised as timm's default (``init_weights_vit_timm``): truncated normal (std
0.02) for every linear weight and the position embedding, zero biases, a class token of
std 1e-6, and torch's default draw for the patch convolution; drawn in timm's order with
timm's sampler, so ``torch.manual_seed(s)`` gives timm's tensors bit for bit
(tests/test_vit.py checks it).
"""

from __future__ import annotations

import torch
from torch import nn

from architectures.vit.config import LAYER_NORM_EPS, ViTConfig, image_shape_message
from zoo.nn.errors import InputError
from zoo.nn.torch import Mlp, SelfAttention
from zoo.nn.torch.init import trunc_normal_
from zoo.nn.torch.remat import checkpointed_call


class PatchEmbed(nn.Module):
    """(N, C, H, W) -> (N, patches, dim): a convolution with stride = kernel = patch_size,
    its map read row by row (timm's ``flatten(2).transpose(1, 2)``)."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_channels, cfg.dim, cfg.patch_size, stride=cfg.patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class Block(nn.Module):
    """Pre-norm: ``x + attention(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        d = cfg.dim
        self.norm1 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.attn = SelfAttention(d, cfg.num_heads, dropout=cfg.attn_dropout)
        # timm's attention is two nn.Linear, whose construction draws a (3 * dim) qkv bias that
        # nn.MultiheadAttention's initialisation (zoo's SelfAttention) does not. The same draw
        # here keeps torch's generator where timm's is: the same seed gives timm's tensors.
        torch.empty(3 * d).uniform_()
        self.attn_drop = nn.Dropout(cfg.dropout)  # timm's proj_drop, after the output projection
        self.norm2 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(d, cfg.mlp_hidden, hidden_dropout=cfg.dropout, output_dropout=cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn_drop(self.attn(self.norm1(x)))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """(N, in_channels, image_size, image_size) float -> (N, num_classes) logits.

    ``forward_features`` gives the final-norm tokens (N, 1 + patches, dim), ``forward_head``
    pools the class token and applies the head (timm's interface). Images of another size
    are refused (:class:`zoo.nn.errors.InputError`): the position embedding has one row per
    patch; fine-tuning at another size interpolates it (``architectures.vit.resize``).

    With ``grad_checkpointing`` on, training keeps only each block's input for backward and
    recomputes the block there (dropout masks included: torch replays the RNG state).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.zoo_config = cfg
        d = cfg.dim
        self.cls_token = nn.Parameter(torch.empty(1, 1, d))
        self.pos_embed = nn.Parameter(torch.empty(1, cfg.num_tokens, d))
        self.patch_embed = PatchEmbed(cfg)
        self.pos_drop = nn.Dropout(cfg.pos_dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.head_drop = nn.Dropout(cfg.head_dropout)
        self.head = nn.Linear(d, cfg.num_classes)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's ``VisionTransformer.init_weights`` in its default mode."""
        trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for block in self.blocks:  # in timm's module order, so the same seed draws the same values
            trunc_normal_(block.attn.in_proj_weight, std=0.02)  # timm's attn.qkv, a Linear
            nn.init.zeros_(block.attn.in_proj_bias)
            for layer in (block.attn.out_proj, block.mlp.fc1, block.mlp.fc2):
                _init_linear(layer)
        _init_linear(self.head)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.zoo_config
        if tuple(x.shape[1:]) != cfg.sample_shape():
            raise InputError(image_shape_message(cfg, tuple(x.shape[1:])))
        h = self.patch_embed(x)
        h = torch.cat([self.cls_token.expand(h.shape[0], -1, -1), h], dim=1)
        h = self.pos_drop(h + self.pos_embed)
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            h = checkpointed_call(block, h) if checkpointing else block(h)
        return self.norm(h)

    def forward_head(self, h: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """The class token's features (``pre_logits``) or the logits."""
        pooled = self.head_drop(h[:, 0])
        return pooled if pre_logits else self.head(pooled)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable


def _init_linear(layer: nn.Linear) -> None:
    """timm's ``init_weights_vit_timm`` for a Linear."""
    trunc_normal_(layer.weight, std=0.02)
    nn.init.zeros_(layer.bias)


def build(cfg: ViTConfig) -> VisionTransformer:
    return VisionTransformer(cfg)
