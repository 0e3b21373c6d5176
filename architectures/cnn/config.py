"""Hyperparameters of the CNN family: plain ConvNets and ResNet-style nets from one config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from zoo.family import MAX_CLASSES, ArchitectureConfig


class CNNConfig(ArchitectureConfig):
    """A stem convolution, stages of conv blocks, and a classifier head.

    Each stage is ``blocks_per_stage`` blocks at ``channels[i]`` channels. Between
    stages the map is halved: by a 2x2 max-pool after every stage (``maxpool``), or by
    a stride-2 first convolution in every stage but the first (``stride``, ResNet style).
    """

    DATA_FIELDS = ("in_channels", "image_size", "num_classes")

    architecture: Literal["cnn"] = "cnn"
    in_channels: PositiveInt = Field(1, description="Channels of the input image (from the data).")
    image_size: PositiveInt = Field(8, description="Height and width of the square input (from the data).")
    num_classes: int = Field(
        10, ge=2, le=MAX_CLASSES, description="Classes of the classifier head (from the data)."
    )
    channels: list[PositiveInt] = Field(
        [32, 64], min_length=1, max_length=8, description="Output channels of each stage."
    )
    blocks_per_stage: int = Field(1, ge=1, le=16, description="Conv blocks in each stage.")
    kernel_size: int = Field(3, ge=1, le=7, description="Square kernel size; odd, so padding is symmetric.")
    stem_channels: PositiveInt | None = Field(
        None, description="Channels of the stem convolution; None uses channels[0]."
    )
    residual: bool = Field(
        False, description="Two-conv residual blocks (ResNet basic block) instead of one conv."
    )
    batch_norm: bool = Field(
        False, description="BatchNorm after every convolution (torch semantics in both twins)."
    )
    bn_momentum: float = Field(
        0.1,
        gt=0,
        lt=1,
        description="BatchNorm running-stat momentum, torch convention (weight of the new batch).",
    )
    bn_eps: float = Field(1e-5, gt=0, description="BatchNorm epsilon.")
    activation: Literal["relu", "gelu", "silu"] = Field(
        "relu", description="Activation after each conv (gelu is the exact erf form)."
    )
    downsample: Literal["maxpool", "stride", "none"] = Field(
        "maxpool", description="How the map shrinks between stages."
    )
    head: Literal["flatten", "avgpool"] = Field(
        "flatten",
        description="Flatten the last map, or average it over space, before the classifier.",
    )
    hidden: PositiveInt | None = Field(
        128, description="Width of a hidden dense layer before the classifier; None for none."
    )
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout before the classifier (and the hidden layer)."
    )

    @model_validator(mode="after")
    def _check(self):
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd for symmetric padding, got {self.kernel_size}")
        if self.feature_size() < 1:
            raise ValueError(
                f"image_size {self.image_size} shrinks to nothing after {len(self.channels)} "
                f"stages of '{self.downsample}' downsampling; use fewer stages or downsample='none'"
            )
        return self

    @property
    def stem_width(self) -> int:
        return self.stem_channels or self.channels[0]

    def strides(self, stage: int) -> list[int]:
        """Stride of each block's first convolution in ``stage``."""
        first = 2 if self.downsample == "stride" and stage > 0 else 1
        return [first] + [1] * (self.blocks_per_stage - 1)

    def feature_size(self) -> int:
        """Height (= width) of the last feature map."""
        size = self.image_size
        for stage in range(len(self.channels)):
            if self.downsample == "stride" and stage > 0:
                size = (size - 1) // 2 + 1  # conv with padding k//2 and stride 2
            if self.downsample == "maxpool":
                size //= 2
        return size

    def head_features(self) -> int:
        if self.head == "avgpool":
            return self.channels[-1]
        return self.channels[-1] * self.feature_size() ** 2

    def sample_shape(self) -> tuple[int, ...]:
        return (self.in_channels, self.image_size, self.image_size)

    def variant(self) -> str:
        """``resnet-style`` (residual blocks: resnet-8, zoo's own small net, not the torchvision
        ``resnet`` family) or a plain ``convnet``."""
        return "resnet-style" if self.residual else "convnet"
