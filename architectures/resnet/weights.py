"""The resnet weight table: torchvision's ``state_dict`` names <-> the Keras twin's variables.

The Keras twin carries the same attribute paths (``layer2.0.downsample.0``), so every port's
Keras layer path is its torch module name.
"""

from __future__ import annotations

from architectures.resnet.config import STAGES, ResNetConfig
from zoo.checkpoint.tables import Port, batchnorm, conv2d, dense


def _conv_bn(conv: str, bn: str, cin: int, cout: int, kernel: int) -> list[Port]:
    return [conv2d(conv, cin, cout, kernel, bias=False), batchnorm(bn, cout)]


def block_names(cfg: ResNetConfig) -> list[str]:
    """Every residual block's module name, in order: ``layer1.0`` ... ``layer4.{n-1}``."""
    return [f"layer{stage + 1}.{index}" for stage in range(STAGES) for index in range(cfg.layers[stage])]


def has_downsample(cfg: ResNetConfig, cin: int, stage: int, index: int) -> bool:
    """torchvision's rule: a projection shortcut where the first block of a stage changes size or channels."""
    return index == 0 and (cfg.stride(stage) != 1 or cin != cfg.stage_channels(stage))


def table(cfg: ResNetConfig) -> list[Port]:
    stem_kernel = 7 if cfg.stem == "imagenet" else 3
    ports = _conv_bn("conv1", "bn1", cfg.in_channels, cfg.width, stem_kernel)
    cin = cfg.width
    for stage in range(STAGES):
        planes, cout = cfg.planes(stage), cfg.stage_channels(stage)
        for index in range(cfg.layers[stage]):
            name = f"layer{stage + 1}.{index}"
            if cfg.block == "basic":
                ports += _conv_bn(f"{name}.conv1", f"{name}.bn1", cin, planes, 3)
                ports += _conv_bn(f"{name}.conv2", f"{name}.bn2", planes, planes, 3)
            else:
                ports += _conv_bn(f"{name}.conv1", f"{name}.bn1", cin, planes, 1)
                ports += _conv_bn(f"{name}.conv2", f"{name}.bn2", planes, planes, 3)
                ports += _conv_bn(f"{name}.conv3", f"{name}.bn3", planes, cout, 1)
            if has_downsample(cfg, cin, stage, index):
                ports += _conv_bn(f"{name}.downsample.0", f"{name}.downsample.1", cin, cout, 1)
            cin = cout
    ports.append(dense("fc", cfg.num_features, cfg.num_classes))
    return ports
