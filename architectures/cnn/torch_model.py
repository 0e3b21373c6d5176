"""The CNN family's torch twin: a plain ``nn.Module``, trained by zoo's Lightning task."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from architectures.cnn.config import CNNConfig
from zoo.nn.torch import BatchNorm2d
from zoo.nn.torch.remat import checkpointed_call

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class ConvBN(nn.Module):
    def __init__(self, cfg: CNNConfig, cin: int, cout: int, kernel: int, stride: int, act: bool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=not cfg.batch_norm)
        # nn.BatchNorm2d that refuses one value per channel in training with the Keras twin's message.
        self.bn = BatchNorm2d(cout, cfg.bn_eps, cfg.bn_momentum) if cfg.batch_norm else None
        self.act = ACTIVATIONS[cfg.activation]() if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.act(x)


class ResidualBlock(nn.Module):
    def __init__(self, cfg: CNNConfig, cin: int, cout: int, stride: int):
        super().__init__()
        k = cfg.kernel_size
        self.first = ConvBN(cfg, cin, cout, k, stride, act=True)
        self.second = ConvBN(cfg, cout, cout, k, 1, act=False)
        needs_projection = stride != 1 or cin != cout
        self.shortcut = ConvBN(cfg, cin, cout, 1, stride, act=False) if needs_projection else None
        self.act = ACTIVATIONS[cfg.activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.act(self.second(self.first(x)) + skip)


class Head(nn.Module):
    def __init__(self, cfg: CNNConfig):
        super().__init__()
        self.pool = cfg.head
        self.dropout = nn.Dropout(cfg.dropout)
        features = cfg.head_features()
        self.hidden = nn.Linear(features, cfg.hidden) if cfg.hidden else None
        self.act = ACTIVATIONS[cfg.activation]()
        self.fc = nn.Linear(cfg.hidden or features, cfg.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.mean(dim=(2, 3)) if self.pool == "avgpool" else x.flatten(1)
        if self.hidden is not None:
            x = self.act(self.hidden(self.dropout(x)))
        return self.fc(self.dropout(x))


class CNN(nn.Module):
    """Input (N, C, H, W) -> logits (N, num_classes).

    With ``grad_checkpointing`` on, training keeps only the input of the stem and of each
    block for backward and recomputes the rest there: less memory for more compute.
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: CNNConfig):
        super().__init__()
        self.zoo_config = cfg
        self.stem = ConvBN(cfg, cfg.in_channels, cfg.stem_width, cfg.kernel_size, 1, act=True)
        self.stages = nn.ModuleList()
        cin = cfg.stem_width
        for s, cout in enumerate(cfg.channels):
            blocks = []
            for stride in cfg.strides(s):
                if cfg.residual:
                    blocks.append(ResidualBlock(cfg, cin, cout, stride))
                else:
                    blocks.append(ConvBN(cfg, cin, cout, cfg.kernel_size, stride, act=True))
                cin = cout
            self.stages.append(nn.Sequential(*blocks))
        self.head = Head(cfg)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self._block(self.stem, x)
        for stage in self.stages:
            for block in stage:
                x = self._block(block, x)
            if self.zoo_config.downsample == "maxpool":
                x = F.max_pool2d(x, 2)
        return x

    def _block(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and self.training and torch.is_grad_enabled():
            return checkpointed_call(block, x)
        return block(x)

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def build(cfg: CNNConfig) -> CNN:
    return CNN(cfg)
