"""The convnext family's torch twin: timm's ``ConvNeXt`` (= torchvision's), module for module.

Module names are timm's (``stem.0``, ``stages.1.downsample.1``, ``stages.2.blocks.0.conv_dw``,
``mlp.fc1``, ``gamma``, ``head.norm``, ``head.fc``), so a timm state dict loads unchanged and a
torchvision one is a rename away (``architectures.convnext.formats``). Each block computes in
timm's order: depthwise 7x7 convolution, channels-last LayerNorm, MLP, back to channels first,
times ``gamma``, stochastic depth, plus the shortcut. Layers are constructed in timm's order
and then initialised as timm does (``_init_weights``: truncated normal of std 0.02 for every
convolution and linear weight, zero biases, with timm's own sampler), so a model built after
``torch.manual_seed(s)`` holds exactly the tensors ``timm.create_model("convnext_*")`` draws
after the same seed. The interface beyond the state dict is timm's too: ``forward_features``,
``forward_head`` and ``set_grad_checkpointing``. The LayerNorms are zoo's (``nn.LayerNorm``'s
tensors): under autocast they normalise in float32 on the CPU too, as CUDA's autocast does; a
plain one would normalise a bfloat16 convolution output in bfloat16 on the CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from architectures.convnext.config import (
    KERNEL_SIZE,
    LAYER_NORM_EPS,
    STAGES,
    ConvNeXtConfig,
    image_size_message,
)
from zoo.nn.errors import InputError
from zoo.nn.torch import DropPath, LayerNorm, LayerNorm2d, Mlp
from zoo.nn.torch.init import trunc_normal_
from zoo.nn.torch.remat import checkpointed_call


class Block(nn.Module):
    """``x + drop_path(gamma * mlp(norm(conv_dw(x))))``, the norm and MLP channels last."""

    def __init__(self, dim: int, hidden: int, layer_scale: float, drop_path: float):
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, KERNEL_SIZE, padding=KERNEL_SIZE // 2, groups=dim)
        self.norm = LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(dim, hidden)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mlp(self.norm(self.conv_dw(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        return self.drop_path(y.mul(self.gamma.reshape(1, -1, 1, 1))) + x


class Stage(nn.Module):
    """A downsampling layer (LayerNorm over the channels, 2x2 stride-2 convolution; none in the
    first stage), then the stage's blocks."""

    def __init__(self, cfg: ConvNeXtConfig, stage: int):
        super().__init__()
        dim = cfg.dims[stage]
        if stage:
            previous = cfg.dims[stage - 1]
            self.downsample = nn.Sequential(
                LayerNorm2d(previous, eps=LAYER_NORM_EPS), nn.Conv2d(previous, dim, 2, stride=2)
            )
        else:
            self.downsample = nn.Identity()
        rates = cfg.drop_path_rates()[stage]
        self.blocks = nn.Sequential(
            *(Block(dim, cfg.mlp_hidden[stage], cfg.layer_scale, rate) for rate in rates)
        )

    def forward(self, x: torch.Tensor, checkpointing: bool = False) -> torch.Tensor:
        x = self.downsample(x)
        for block in self.blocks:
            x = checkpointed_call(block, x) if checkpointing else block(x)
        return x


class Head(nn.Module):
    """Global average pooling, LayerNorm, dropout and the classifier (timm's
    ``NormMlpClassifierHead``); no classifier for task "features"."""

    def __init__(self, cfg: ConvNeXtConfig):
        super().__init__()
        self.norm = LayerNorm(cfg.num_features, eps=LAYER_NORM_EPS)
        self.drop = nn.Dropout(cfg.head_dropout)
        self.fc = nn.Linear(cfg.num_features, cfg.num_classes) if cfg.task == "classification" else None

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.drop(self.norm(x.mean((2, 3))))
        return x if pre_logits or self.fc is None else self.fc(x)


class ConvNeXt(nn.Module):
    """Input (N, C, H, W) -> logits (N, num_classes), or (N, dims[3]) features.

    Images smaller than ``8 * patch_size`` a side are refused (:class:`zoo.nn.errors.InputError`,
    the Keras twin's words): the last downsampling would have no pixel left. With
    ``grad_checkpointing`` on, training keeps only each block's input for backward and
    recomputes the block there (its drop-path mask too: torch replays the RNG state).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: ConvNeXtConfig):
        super().__init__()
        self.zoo_config = cfg
        p = cfg.patch_size
        self.stem = nn.Sequential(
            nn.Conv2d(cfg.in_channels, cfg.dims[0], p, stride=p), LayerNorm2d(cfg.dims[0], eps=LAYER_NORM_EPS)
        )
        self.stages = nn.Sequential(*(Stage(cfg, stage) for stage in range(STAGES)))
        self.head = Head(cfg)
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        """timm's ``_init_weights`` (head_init_scale 1), in module order as its ``named_apply``."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def blocks(self) -> list[Block]:
        """Every block, ``stages.0.blocks.0`` first."""
        return [block for stage in self.stages for block in stage.blocks]

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) -> the last stage's map (N, dims[3], h, w)."""
        cfg = self.zoo_config
        if min(x.shape[2:]) < cfg.min_image_size:
            raise InputError(image_size_message(cfg.patch_size, min(x.shape[2:])))
        x = self.stem(x)
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for stage in self.stages:
            x = stage(x, checkpointing)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """The last stage's map -> logits (or the pooled, normalised features, ``pre_logits``)."""
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def build(cfg: ConvNeXtConfig) -> ConvNeXt:
    return ConvNeXt(cfg)
