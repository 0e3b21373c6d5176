"""Carrying a ViT's weights to other data when fine-tuning, as timm does when it loads
pretrained weights into a model of another image size or channel count.

- Another image size (another patch grid): the position embedding is resampled by timm's
  ``resample_abs_pos_embed`` with the arguments its ViT checkpoint filter passes (bicubic,
  antialiased, the class token's row kept as it is).
- Another channel count: the patch convolution's weights are adapted by timm's
  ``adapt_input_conv`` (one channel: the sum over the old channels; more: the old ones
  repeated and scaled by old / new).

Both run on the canonical tensors before either twin loads them, so they are the same in
both frameworks. torch does the arithmetic (imported only here), so the values are the
very ones timm computes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from architectures.vit.config import ViTConfig


def adapt_tensors(tensors: Mapping[str, np.ndarray], old: ViTConfig, new: ViTConfig) -> dict[str, np.ndarray]:
    """The tensors ``new`` data re-shapes that can be carried over (``Family.adapt_tensors``)."""
    carried = {}
    if new.grid_size != old.grid_size:
        carried["pos_embed"] = resample_pos_embed(tensors["pos_embed"], new.grid_size)
    if new.in_channels != old.in_channels:
        carried["patch_embed.proj.weight"] = adapt_input_channels(
            tensors["patch_embed.proj.weight"], new.in_channels
        )
    return carried


def resample_pos_embed(pos_embed: np.ndarray, grid_size: int) -> np.ndarray:
    """(1, 1 + g * g, dim) -> (1, 1 + grid_size^2, dim): timm's ``resample_abs_pos_embed(posemb,
    new_size=(grid_size, grid_size), num_prefix_tokens=1)`` at its defaults (bicubic, antialias on)."""
    import torch
    import torch.nn.functional as F

    rows, dim = pos_embed.shape[1], pos_embed.shape[2]
    old = math.isqrt(rows - 1)
    if old * old + 1 != rows:
        raise ValueError(f"pos_embed has {rows} rows, not a class token plus a square grid of patches")
    table = torch.from_numpy(np.ascontiguousarray(pos_embed, dtype=np.float32))
    prefix, grid = table[:, :1], table[:, 1:]
    grid = grid.reshape(1, old, old, dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(grid_size, grid_size), mode="bicubic", antialias=True)
    grid = grid.permute(0, 2, 3, 1).reshape(1, -1, dim)
    return torch.cat([prefix, grid], dim=1).numpy().astype(pos_embed.dtype)


def adapt_input_channels(weight: np.ndarray, in_channels: int) -> np.ndarray:
    """(dim, c, p, p) -> (dim, in_channels, p, p): timm's ``adapt_input_conv(in_channels, weight,
    base_chans=c)``."""
    import torch

    base = weight.shape[1]
    w = torch.from_numpy(np.ascontiguousarray(weight, dtype=np.float32))
    if in_channels == 1:
        w = w.sum(dim=1, keepdim=True)
    else:
        w = w.repeat(1, math.ceil(in_channels / base), 1, 1)[:, :in_channels]
        w = w * (base / float(in_channels))
    return w.numpy().astype(weight.dtype)
