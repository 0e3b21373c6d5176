"""The convnext weight table: the torch twin's ``state_dict`` names (timm's) <-> the Keras variables.

The Keras twin carries the same attribute paths (``stages.1.downsample.1``,
``stages.2.blocks.0.mlp.fc1``), so every port's Keras layer path is its torch module name. A
block's layer scale ``gamma`` is a parameter of the block itself, first in its ``state_dict``
(a module's own tensors precede its children's), and a variable of the Keras block.
"""

from __future__ import annotations

from architectures.convnext.config import KERNEL_SIZE, STAGES, ConvNeXtConfig
from zoo.checkpoint.tables import Arrays, Port, TensorSpec, conv2d, dense, depthwise_conv2d, layernorm
from zoo.nn.ports import mlp


def _same(gamma) -> Arrays:
    return (gamma,)


def layer_scale(block: str, channels: int) -> Port:
    """A block's ``gamma`` (channels,): the same vector in both twins."""
    return Port((TensorSpec(f"{block}.gamma", (channels,)),), block, ("gamma",), _same, _same)


def block_names(cfg: ConvNeXtConfig) -> list[str]:
    """Every block's module name, in order: ``stages.0.blocks.0`` ... ``stages.3.blocks.{n-1}``."""
    return [f"stages.{s}.blocks.{j}" for s in range(STAGES) for j in range(cfg.depths[s])]


def table(cfg: ConvNeXtConfig) -> list[Port]:
    ports = [conv2d("stem.0", cfg.in_channels, cfg.dims[0], cfg.patch_size), layernorm("stem.1", cfg.dims[0])]
    for stage, (depth, dim) in enumerate(zip(cfg.depths, cfg.dims, strict=True)):
        if stage:
            previous = cfg.dims[stage - 1]
            down = f"stages.{stage}.downsample"
            ports += [layernorm(f"{down}.0", previous), conv2d(f"{down}.1", previous, dim, 2)]
        for index in range(depth):
            name = f"stages.{stage}.blocks.{index}"
            ports += [
                layer_scale(name, dim),
                depthwise_conv2d(f"{name}.conv_dw", dim, KERNEL_SIZE),
                layernorm(f"{name}.norm", dim),
                *mlp(f"{name}.mlp", dim, cfg.mlp_hidden[stage]),
            ]
    ports.append(layernorm("head.norm", cfg.num_features))
    if cfg.task == "classification":
        ports.append(dense("head.fc", cfg.num_features, cfg.num_classes))
    return ports
