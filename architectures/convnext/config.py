"""Hyperparameters of the convnext family: torchvision's and timm's ConvNeXt (v1).

Both libraries build the same network (timm's ``convnext_*`` at its defaults is torchvision's
``convnext_*``, tensor for tensor, under other names): a patchify stem, four stages of ConvNeXt
blocks with a downsampling layer between stages, global average pooling, LayerNorm and a linear
head. The kernel (7x7 depthwise), the MLP expansion (4x) and the LayerNorm epsilon (1e-6) are
fixed in both and here; the widths, depths, stem patch, layer-scale start and the two dropouts
are fields, named after torchvision where it names them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from zoo.family import MAX_CLASSES, ArchitectureConfig

STAGES = 4  # timm's ConvNeXt always has four; torchvision's published ones too
KERNEL_SIZE = 7  # the depthwise convolution of every block
MLP_RATIO = 4  # each block's MLP is 4 x the stage width
LAYER_NORM_EPS = 1e-6  # every LayerNorm of ConvNeXt (torch's default is 1e-5, Keras' 1e-3)
DOWNSAMPLINGS = STAGES - 1  # stages 2..4 open with a 2x2 stride-2 convolution


class ConvNeXtConfig(ArchitectureConfig):
    """A stem (``patch_size`` x ``patch_size`` convolution with that stride, LayerNorm over the
    channels), then four stages of ``depths[i]`` blocks at ``dims[i]`` channels; stages 2..4
    open with a downsampling layer (LayerNorm over the channels, 2x2 stride-2 convolution).

    A block is ``x + drop_path(gamma * mlp(norm(dwconv7x7(x))))``: a depthwise 7x7 convolution,
    a LayerNorm over the channels (channels last), a 4x MLP with exact GELU, a learned per-channel
    layer scale ``gamma`` starting at ``layer_scale``, and stochastic depth whose rate rises
    linearly from 0 at the first block to ``path_dropout`` at the last (torchvision's rule).
    The head pools globally, normalises and classifies; task "features" stops before the
    classifier and returns the pooled, normalised features (timm's ``num_classes=0`` model).
    """

    DATA_FIELDS = ("task", "in_channels", "image_size", "num_classes")

    architecture: Literal["convnext"] = "convnext"
    task: Literal["classification", "features"] = Field(
        "classification",
        description="Logits over the classes, or the backbone's pooled and normalised features "
        "(N, dims[3]) without the classifier (timm's num_classes=0).",
    )
    in_channels: PositiveInt = Field(3, le=4096, description="Channels of the input image (from the data).")
    image_size: PositiveInt = Field(
        224, le=8192, description="Height and width of the square input (from the data)."
    )
    num_classes: int = Field(
        1000, ge=2, le=MAX_CLASSES, description="Classes of the classifier head (from the data)."
    )
    depths: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        [3, 3, 9, 3],
        min_length=STAGES,
        max_length=STAGES,
        description="Blocks in each of the four stages (convnext_tiny: [3, 3, 9, 3]; small and base: "
        "[3, 3, 27, 3]).",
    )
    dims: list[Annotated[int, Field(ge=1, le=8192)]] = Field(
        [96, 192, 384, 768],
        min_length=STAGES,
        max_length=STAGES,
        description="Channels of each stage (tiny and small: [96, 192, 384, 768]; base: "
        "[128, 256, 512, 1024]).",
    )
    patch_size: int = Field(
        4,
        ge=1,
        le=64,
        description="Side and stride of the stem convolution (torchvision's and timm's ImageNet stem: "
        "4); the image must be at least 8 x patch_size pixels a side.",
    )
    layer_scale: float = Field(
        1e-6,
        gt=0,
        le=1,
        description="Initial value of every block's layer scale gamma (torchvision's layer_scale, "
        "timm's ls_init_value).",
    )
    path_dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Stochastic depth in training: the probability that a block's residual branch is "
        "dropped for a whole sample, rising linearly from 0 at the first block to this at the last "
        "(torchvision's stochastic_depth_prob: 0.1 for tiny, 0.4 small, 0.5 base; timm's "
        "drop_path_rate). Named as a dropout, so zoo compare and the parity tests switch it off.",
    )
    head_dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Dropout on the pooled features before the classifier (timm's drop_rate; "
        "torchvision has none: 0).",
    )

    @field_validator("depths", "dims", mode="before")
    @classmethod
    def _four_stages(cls, value: Any, info) -> Any:
        if isinstance(value, list | tuple) and len(value) != STAGES:
            example = "[3, 3, 9, 3]" if info.field_name == "depths" else "[96, 192, 384, 768]"
            raise ValueError(
                f"{info.field_name} gives one value for each of ConvNeXt's {STAGES} stages, e.g. "
                f"{example} for convnext-tiny; got {len(value)}: {list(value)}"
            )
        return value

    @model_validator(mode="after")
    def _image_fits(self):
        if self.image_size < self.min_image_size:
            raise ValueError(image_size_message(self.patch_size, self.image_size))
        return self

    @property
    def min_image_size(self) -> int:
        """The smallest side the network reads: the stem leaves image_size // patch_size pixels,
        and each of the three downsamplings halves a side that must be at least 2."""
        return self.patch_size * 2**DOWNSAMPLINGS

    @property
    def num_features(self) -> int:
        """Channels of the last stage: the classifier's input (timm's ``num_features``)."""
        return self.dims[-1]

    @property
    def mlp_hidden(self) -> list[int]:
        return [MLP_RATIO * d for d in self.dims]

    def drop_path_rates(self) -> list[list[float]]:
        """Each block's stochastic-depth rate, by stage: ``path_dropout * i / (blocks - 1)`` for
        the i-th block of the network (torchvision's rule; timm's is the same, in float32)."""
        total, rates, i = sum(self.depths), [], 0
        for depth in self.depths:
            rates.append([self.path_dropout * (i + j) / (total - 1) for j in range(depth)])
            i += depth
        return rates

    def feature_size(self) -> int:
        """Height (= width) of the last stage's map, following torch's output-size arithmetic."""
        return self.image_size // self.patch_size // 2**DOWNSAMPLINGS

    def sample_shape(self) -> tuple[int, ...]:
        return (self.in_channels, self.image_size, self.image_size)

    def task_info(self) -> dict[str, Any]:
        if self.task == "features":
            return {"num_features": self.num_features}
        return {"num_classes": self.num_classes}


def image_size_message(patch_size: int, got: int | None) -> str:
    """Config validation and both twins refuse an image too small for the network in these words
    (``got``: its smaller side; None inside a graph, where only the run knows it)."""
    need = patch_size * 2**DOWNSAMPLINGS
    fitting = (got or 0) // 2**DOWNSAMPLINGS
    other = f", or use patch_size {fitting} or less" if fitting else ""
    return (
        f"images must be at least {need} pixels a side for patch_size {patch_size} (the stem divides "
        f"the side by patch_size and three downsamplings halve it, down to at least one pixel); "
        f"got {'a smaller image' if got is None else got}: resize the images to {need} or more{other}"
    )
