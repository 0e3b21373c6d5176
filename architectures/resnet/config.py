"""Hyperparameters of the resnet family: torchvision's ResNet, with the few knobs it hard-codes opened up.

torchvision fixes the stem width at 64, the input at 3 channels and the stem at the ImageNet
one; here they are fields, so the same definition also covers grey images and 32x32 inputs.
At the defaults (and in every preset) the network is torchvision's exactly.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, field_validator

from zoo.family import MAX_CLASSES, ArchitectureConfig

STAGES = 4  # layer1..layer4, as torchvision (and timm) name them
EXPANSION = {"basic": 1, "bottleneck": 4}  # output channels of a block / its planes
# Total stride from the input to layer4's map: the ImageNet stem halves twice (conv, max pool),
# the small one not at all; layer2..layer4 halve once each.
STEM_STRIDE = {"imagenet": 4, "small": 1}


class ResNetConfig(ArchitectureConfig):
    """A stem, four stages of residual blocks (``layers[i]`` blocks each), global average pooling, fc.

    Stage ``i`` works at ``width * 2**i`` planes; a bottleneck block widens its output 4x
    (ResNet v1.5: the stride sits on the 3x3 convolution). A block whose input differs from
    its output in channels or size adds a 1x1 convolution + BatchNorm on the shortcut.
    """

    DATA_FIELDS = ("in_channels", "image_size", "num_classes")

    architecture: Literal["resnet"] = "resnet"
    in_channels: PositiveInt = Field(3, description="Channels of the input image (from the data).")
    image_size: PositiveInt = Field(224, description="Height and width of the square input (from the data).")
    num_classes: int = Field(
        1000, ge=2, le=MAX_CLASSES, description="Classes of the classifier head (from the data)."
    )
    block: Literal["basic", "bottleneck"] = Field(
        "basic",
        description="basic: two 3x3 convs (resnet18/34); bottleneck: 1x1, 3x3, 1x1 with 4x expansion "
        "(resnet50/101).",
    )
    layers: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        [2, 2, 2, 2],
        min_length=STAGES,
        max_length=STAGES,
        description="Blocks in each of the four stages, layer1..layer4 (resnet50: [3, 4, 6, 3]).",
    )
    width: int = Field(
        64, ge=1, le=1024, description="Channels of the stem and planes of layer1 (doubling each stage)."
    )
    stem: Literal["imagenet", "small"] = Field(
        "imagenet",
        description="imagenet: 7x7/2 conv, BN, ReLU, 3x3/2 max pool (torchvision's); small: 3x3/1 conv, "
        "BN, ReLU, no pool (for 32x32 images such as CIFAR).",
    )
    zero_init_residual: bool = Field(
        False,
        description="Start the last BatchNorm of each block at weight 0, so every block begins as the "
        "identity (torchvision's zero_init_residual).",
    )
    bn_eps: float = Field(1e-5, gt=0, description="BatchNorm epsilon.")
    bn_momentum: float = Field(
        0.1,
        gt=0,
        lt=1,
        description="BatchNorm running-stat momentum, torch convention (weight of the new batch).",
    )
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout before the classifier (torchvision has none: 0)."
    )

    @field_validator("layers", mode="before")
    @classmethod
    def _four_stages(cls, value: Any) -> Any:
        if isinstance(value, list | tuple) and len(value) != STAGES:
            raise ValueError(
                f"layers gives the block count of each of ResNet's {STAGES} stages (layer1..layer4), e.g. "
                f"[2, 2, 2, 2] for resnet18 or [3, 4, 6, 3] for resnet50; got {len(value)}: {list(value)}"
            )
        return value

    @property
    def expansion(self) -> int:
        return EXPANSION[self.block]

    @property
    def total_stride(self) -> int:
        return STEM_STRIDE[self.stem] * 2 ** (STAGES - 1)

    def planes(self, stage: int) -> int:
        """The planes of ``stage`` (0-based): its 3x3 convolutions' width."""
        return self.width * 2**stage

    def stage_channels(self, stage: int) -> int:
        """Output channels of every block in ``stage``."""
        return self.planes(stage) * self.expansion

    def stride(self, stage: int) -> int:
        """Stride of the first block of ``stage``: layer1 keeps the size, the others halve it."""
        return 1 if stage == 0 else 2

    @property
    def num_features(self) -> int:
        """Channels of the last map, the classifier's input (timm's ``num_features``)."""
        return self.stage_channels(STAGES - 1)

    def feature_size(self) -> int:
        """Height (= width) of layer4's map, following torch's output-size arithmetic."""
        size = self.image_size
        if self.stem == "imagenet":
            size = (size + 2 * 3 - 7) // 2 + 1  # 7x7 conv, stride 2, padding 3
            size = (size + 2 * 1 - 3) // 2 + 1  # 3x3 max pool, stride 2, padding 1
        for _ in range(1, STAGES):  # layer2..layer4 open with a 3x3 conv, stride 2, padding 1
            size = (size + 2 * 1 - 3) // 2 + 1
        return size

    def sample_shape(self) -> tuple[int, ...]:
        return (self.in_channels, self.image_size, self.image_size)
