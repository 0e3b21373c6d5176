"""The convnext family's Keras twin: the torch twin's structure and attribute names, channels last.

``stem`` is a list [conv, norm], ``stages`` a list of stages whose ``downsample`` is a list
[norm, conv] (None in the first stage) and whose ``blocks`` a list, so the weight table's paths
(``stages.1.downsample.1``, ``stages.2.blocks.0.mlp.fc1``) are the torch ``state_dict`` names.
On a channels-last map both of torch's LayerNorms (over the channels of a channels-first map,
and channels last inside the blocks) are one LayerNorm over the last axis: zoo's, computed in
torch's order, with ConvNeXt's epsilon 1e-6 (Keras' default is 1e-3). GELU is exact (zoo's
``Mlp``). The depthwise 7x7 convolution at stride 1 pads 3 on every side under Keras' "same",
as torch's ``padding=3`` does; the stem and downsampling convolutions tile the map exactly
("valid"). Under mixed precision (docs/precision.md) the norms compute and return float32, as the
torch twin's do, and the dense and convolution layers are zoo's: the bias added in float32, the
convolutions summed in float32 on the CPU.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.convnext.config import (
    KERNEL_SIZE,
    LAYER_NORM_EPS,
    STAGES,
    ConvNeXtConfig,
    image_size_message,
)
from zoo.nn.errors import InputError
from zoo.nn.keras import Conv2D, Dense, DepthwiseConv2D, DropPath, LayerNorm, Mlp, require
from zoo.nn.keras.remat import checkpointed_call


def _normal() -> keras.initializers.Initializer:
    """timm's ``trunc_normal_(std=0.02)`` truncates at +-2 (absolute), 100 standard deviations
    out: it is a normal draw (Keras' TruncatedNormal would cut at 2 std)."""
    return keras.initializers.RandomNormal(stddev=0.02)


def _norm() -> LayerNorm:
    return LayerNorm(epsilon=LAYER_NORM_EPS)


def _conv(filters: int, size: int) -> Conv2D:
    """A ``size`` x ``size`` convolution with stride ``size``: the stem's patches, a downsampling."""
    return Conv2D(filters, size, strides=size, padding="valid", kernel_initializer=_normal())


class Block(layers.Layer):
    """``x + drop_path(gamma * mlp(norm(conv_dw(x))))``."""

    def __init__(self, dim: int, hidden: int, layer_scale: float, drop_path: float, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.layer_scale = dim, layer_scale
        self.conv_dw = DepthwiseConv2D(KERNEL_SIZE, padding="same", depthwise_initializer=_normal())
        self.norm = _norm()
        self.mlp = Mlp(dim, hidden, kernel_initializer=_normal(), bias_initializer="zeros")
        self.drop_path = DropPath(drop_path)

    def build(self, input_shape):
        self.gamma = self.add_weight(
            shape=(self.dim,), initializer=keras.initializers.Constant(self.layer_scale), name="gamma"
        )
        self.conv_dw.build(input_shape)
        self.norm.build(input_shape)
        self.mlp.build(input_shape)

    def call(self, x, training=False):
        y = self.mlp(self.norm(self.conv_dw(x)), training=training)
        # gamma joins the float32 stream: torch multiplies a low-precision MLP output by the
        # float32 parameter, and type promotion makes the product (and the sum) float32.
        y = ops.cast(y, self.compute_dtype) * ops.cast(self.gamma, self.compute_dtype)
        return self.drop_path(y, training=training) + ops.cast(x, self.compute_dtype)


class Stage(layers.Layer):
    """The downsampling layer [norm, conv] (None in the first stage), then ``blocks``."""

    def __init__(self, cfg: ConvNeXtConfig, stage: int, **kwargs):
        super().__init__(**kwargs)
        self.downsample = [_norm(), _conv(cfg.dims[stage], 2)] if stage else None
        rates = cfg.drop_path_rates()[stage]
        self.blocks = [Block(cfg.dims[stage], cfg.mlp_hidden[stage], cfg.layer_scale, rate) for rate in rates]

    def call(self, x, training=False, checkpointing: bool = False):
        if self.downsample is not None:
            norm, conv = self.downsample
            x = conv(norm(x))
        for block in self.blocks:
            x = checkpointed_call(block, x) if checkpointing else block(x, training=training)
        return x


class Head(layers.Layer):
    """Global average pooling, LayerNorm, dropout and the classifier (none for task "features")."""

    def __init__(self, cfg: ConvNeXtConfig, **kwargs):
        super().__init__(**kwargs)
        self.norm = _norm()
        self.drop = layers.Dropout(cfg.head_dropout)
        classifies = cfg.task == "classification"
        self.fc = Dense(cfg.num_classes, kernel_initializer=_normal()) if classifies else None

    def call(self, x, training=False, pre_logits: bool = False):
        x = self.drop(self.norm(ops.mean(x, axis=(1, 2))), training=training)
        return x if pre_logits or self.fc is None else self.fc(x)


class ConvNeXt(keras.Model):
    """Input (N, H, W, C) -> logits (N, num_classes), or (N, dims[3]) features.

    Images smaller than ``8 * patch_size`` a side are refused with the torch twin's
    :class:`zoo.nn.errors.InputError` (inside a graph whose shapes are unknown until it runs,
    the step fails with its message). With ``grad_checkpointing`` on, training keeps only each
    block's input for backward and recomputes the block there, with the forward pass's
    drop-path masks (``zoo.nn.keras.remat``).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: ConvNeXtConfig, **kwargs):
        super().__init__(**kwargs)
        self.zoo_config = cfg
        self.stem = [_conv(cfg.dims[0], cfg.patch_size), _norm()]
        self.stages = [Stage(cfg, stage) for stage in range(STAGES)]
        self.head = Head(cfg)

    def blocks(self) -> list[Block]:
        """Every block, ``stages.0.blocks.0`` first."""
        return [block for stage in self.stages for block in stage.blocks]

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x, training=False):
        """(N, H, W, C) -> the last stage's map (N, h, w, dims[3])."""
        conv, norm = self.stem
        # The norm's output is float32 under mixed precision, as the torch twin's (zoo's LayerNorm).
        x = norm(conv(self._checked(x)))
        checkpointing = bool(training and self.grad_checkpointing)
        for stage in self.stages:
            x = stage(x, training=training, checkpointing=checkpointing)
        return x

    def forward_head(self, x, training=False, pre_logits: bool = False):
        """The last stage's map -> logits (or the pooled, normalised features, ``pre_logits``)."""
        return self.head(x, training=training, pre_logits=pre_logits)

    def call(self, x, training=False):
        return self.forward_head(self.forward_features(x, training=training), training=training)

    def _checked(self, x):
        """``x`` if both its sides reach the smallest image the network reads; refused otherwise."""
        cfg = self.zoo_config
        sides = tuple(x.shape[1:3])
        if None not in sides:
            if min(sides) < cfg.min_image_size:
                raise InputError(image_size_message(cfg.patch_size, min(sides)))
            return x
        shape = ops.shape(x)
        fits = ops.minimum(shape[1], shape[2]) >= cfg.min_image_size
        return require(fits, image_size_message(cfg.patch_size, None), x)


def build(cfg: ConvNeXtConfig) -> ConvNeXt:
    model = ConvNeXt(cfg)
    # No variable's shape depends on the image size (the head pools globally), so the smallest
    # image the network reads builds them at a fraction of a full-size pass's cost.
    side = cfg.min_image_size
    model(ops.zeros((1, side, side, cfg.in_channels)))
    return model
