"""Hyperparameters of the ViT family: timm's ``VisionTransformer`` as ``vit_*_patch16_224`` builds it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from zoo.family import MAX_CLASSES, ArchitectureConfig

LAYER_NORM_EPS = 1e-6  # timm's ViT LayerNorm (torch's default is 1e-5, Keras' 1e-3)


class ViTConfig(ArchitectureConfig):
    """Patch embedding, a class token and learned positions, ``depth`` pre-norm blocks, a final
    norm, and a linear head on the class token: timm's ``vit_*_patch16_224`` definition.

    The image is cut into (image_size / patch_size)^2 patches by a strided convolution; the
    class token is prepended and a learned (1, 1 + patches, dim) position embedding added.
    Each block is ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))`` (qkv bias, exact GELU,
    LayerNorm epsilon 1e-6). The dropout fields are timm's ``proj_drop_rate``,
    ``attn_drop_rate``, ``pos_drop_rate`` and ``drop_rate``.
    """

    DATA_FIELDS = ("in_channels", "image_size", "num_classes")

    architecture: Literal["vit"] = "vit"
    in_channels: PositiveInt = Field(3, le=4096, description="Channels of the input image (from the data).")
    image_size: PositiveInt = Field(
        224, le=8192, description="Height and width of the square input (from the data)."
    )
    num_classes: int = Field(
        1000, ge=2, le=MAX_CLASSES, description="Classes of the classifier head (from the data)."
    )
    patch_size: PositiveInt = Field(
        16, le=1024, description="Side of the square patches the image is cut into; divides image_size."
    )
    dim: int = Field(192, ge=1, le=8192, description="Width of the token embeddings (timm's embed_dim).")
    depth: int = Field(12, ge=1, le=128, description="Transformer blocks.")
    num_heads: int = Field(3, ge=1, le=128, description="Attention heads; must divide dim.")
    mlp_ratio: float = Field(
        4.0, gt=0, le=64, description="Hidden width of each block's MLP, as a multiple of dim (rounded down)."
    )
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Dropout on the MLP's hidden layer and on both residual branches "
        "(timm's proj_drop_rate).",
    )
    attn_dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the attention probabilities (timm's attn_drop_rate)."
    )
    pos_dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout after adding the position embedding (timm's pos_drop_rate)."
    )
    head_dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the pooled class token before the head (timm's drop_rate)."
    )

    @model_validator(mode="after")
    def _check(self):
        if self.image_size % self.patch_size:
            fitting = [p for p in range(1, self.image_size + 1) if self.image_size % p == 0][-6:]
            raise ValueError(
                f"image_size {self.image_size} is not divisible by patch_size {self.patch_size}: a ViT "
                f"cuts the image into whole {self.patch_size}x{self.patch_size} patches; use an image "
                f"size that is a multiple of {self.patch_size} (resize the images), or a patch_size that "
                f"divides {self.image_size} ({', '.join(map(str, fitting))})"
            )
        if self.dim % self.num_heads:
            fitting = [h for h in range(1, min(self.dim, 128) + 1) if self.dim % h == 0][-6:]
            raise ValueError(
                f"dim {self.dim} is not divisible by num_heads {self.num_heads}; each head gets "
                f"dim / num_heads features: use num_heads in {', '.join(map(str, fitting))}"
            )
        if self.mlp_hidden < 1:
            raise ValueError(
                f"mlp_ratio {self.mlp_ratio} leaves the MLP int(dim * mlp_ratio) = {self.mlp_hidden} hidden "
                f"units; use mlp_ratio >= {1 / self.dim:.4g}"
            )
        return self

    @property
    def grid_size(self) -> int:
        """Patches along each side of the image."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid_size**2

    @property
    def num_tokens(self) -> int:
        """The class token and one token per patch: the rows of the position embedding."""
        return 1 + self.num_patches

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return int(self.dim * self.mlp_ratio)

    def sample_shape(self) -> tuple[int, ...]:
        return (self.in_channels, self.image_size, self.image_size)


def image_shape_message(config: ViTConfig, got: tuple) -> str:
    """Both twins refuse an image of another shape than the config's, in these words: the
    position embedding has one row per patch of an ``image_size`` image."""
    c, s = config.in_channels, config.image_size
    return (
        f"images must be {c} x {s} x {s} (channels x height x width: the model's in_channels and "
        f"image_size); got {' x '.join(str(d) for d in got)}: resize the images, or fine-tune the "
        f"model at the new image_size (its position embedding is interpolated)"
    )
