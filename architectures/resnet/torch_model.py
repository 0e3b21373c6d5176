"""The resnet family's torch twin: torchvision's ResNet, module for module.

Module names, registration order and construction order are torchvision's
(``torchvision/models/resnet.py``), so the ``state_dict`` keys are torchvision's (and timm's)
and a model built after ``torch.manual_seed(s)`` holds exactly the tensors torchvision's
``resnet*(num_classes=...)`` draws after the same seed: every layer is constructed in the
same order (a stage's shortcut before its first block), drawing torch's defaults, and the
convolutions are then re-drawn Kaiming-normal (fan out, ReLU gain) in ``modules()`` order.
BatchNorm is zoo's ``BatchNorm2d`` (torch's, with zoo's refusal of one value per channel in
training). The interface beyond torchvision's is timm's: ``forward_features``,
``forward_head`` and ``set_grad_checkpointing``.
"""

from __future__ import annotations

import torch
from torch import nn

from architectures.resnet.config import STAGES, ResNetConfig
from architectures.resnet.weights import has_downsample
from zoo.nn.torch import BatchNorm2d
from zoo.nn.torch.remat import checkpointed_call


def _bn(cfg: ResNetConfig, channels: int) -> BatchNorm2d:
    return BatchNorm2d(channels, eps=cfg.bn_eps, momentum=cfg.bn_momentum)


def _conv(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    """torchvision's conv3x3 / conv1x1: no bias, padding kernel // 2."""
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (the first with the stage's stride) and the shortcut."""

    expansion = 1

    def __init__(self, cfg: ResNetConfig, cin: int, planes: int, stride: int, downsample: nn.Module | None):
        super().__init__()
        self.conv1 = _conv(cin, planes, 3, stride)
        self.bn1 = _bn(cfg, planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv(planes, planes, 3)
        self.bn2 = _bn(cfg, planes)
        self.downsample = downsample

    @property
    def last_bn(self) -> BatchNorm2d:
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 down to ``planes``, 3x3 with the stride (v1.5), 1x1 up to 4 x ``planes``, and the shortcut."""

    expansion = 4

    def __init__(self, cfg: ResNetConfig, cin: int, planes: int, stride: int, downsample: nn.Module | None):
        super().__init__()
        self.conv1 = _conv(cin, planes, 1)
        self.bn1 = _bn(cfg, planes)
        self.conv2 = _conv(planes, planes, 3, stride)
        self.bn2 = _bn(cfg, planes)
        self.conv3 = _conv(planes, planes * self.expansion, 1)
        self.bn3 = _bn(cfg, planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    @property
    def last_bn(self) -> BatchNorm2d:
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


BLOCKS: dict[str, type[BasicBlock] | type[Bottleneck]] = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(nn.Module):
    """Input (N, C, H, W) -> logits (N, num_classes).

    With ``grad_checkpointing`` on, training keeps only each residual block's input for
    backward and recomputes the block there (the stem and head are kept, as in timm).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        self.zoo_config = cfg
        if cfg.stem == "imagenet":
            self.conv1 = nn.Conv2d(cfg.in_channels, cfg.width, 7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = _conv(cfg.in_channels, cfg.width, 3)
        self.bn1 = _bn(cfg, cfg.width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1) if cfg.stem == "imagenet" else nn.Identity()
        cin = cfg.width
        for stage in range(STAGES):
            self.add_module(f"layer{stage + 1}", self._make_layer(cfg, cin, stage))
            cin = cfg.stage_channels(stage)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(cfg.dropout)
        self.fc = nn.Linear(cfg.num_features, cfg.num_classes)
        self._init_weights(cfg.zero_init_residual)

    @staticmethod
    def _make_layer(cfg: ResNetConfig, cin: int, stage: int) -> nn.Sequential:
        block, planes, cout = BLOCKS[cfg.block], cfg.planes(stage), cfg.stage_channels(stage)
        blocks = []
        for index in range(cfg.layers[stage]):
            downsample = None
            if has_downsample(cfg, cin, stage, index):  # built before its block, as torchvision does
                downsample = nn.Sequential(_conv(cin, cout, 1, cfg.stride(stage)), _bn(cfg, cout))
            stride = cfg.stride(stage) if index == 0 else 1
            blocks.append(block(cfg, cin, planes, stride, downsample))
            cin = cout
        return nn.Sequential(*blocks)

    def _init_weights(self, zero_init_residual: bool) -> None:
        """torchvision's: Kaiming-normal convolutions (fan out), BatchNorm at 1 and 0, fc left at
        nn.Linear's default; optionally the last BatchNorm of every block at weight 0."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)
        if zero_init_residual:
            for block in self.blocks():
                nn.init.constant_(block.last_bn.weight, 0)

    def blocks(self) -> list[BasicBlock | Bottleneck]:
        """Every residual block, layer1.0 first."""
        return [block for stage in range(STAGES) for block in getattr(self, f"layer{stage + 1}")]

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) -> layer4's map (N, num_features, h, w)."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks():
            x = checkpointed_call(block, x) if checkpointing else block(x)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """layer4's map -> logits (or the pooled features, ``pre_logits``)."""
        x = torch.flatten(self.avgpool(x), 1)
        return x if pre_logits else self.fc(self.dropout(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def build(cfg: ResNetConfig) -> ResNet:
    return ResNet(cfg)
