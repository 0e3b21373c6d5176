"""The resnet family's Keras twin: the torch twin's structure and attribute names, channels last.

``layer1`` .. ``layer4`` are lists of blocks and a block's ``downsample`` a list [conv, bn],
so the weight table's paths (``layer2.0.downsample.0``) are the torch ``state_dict`` names.
Padding is torch's, explicitly: symmetric zero padding then a "valid" convolution (TensorFlow's
"same" pads a stride-2 convolution only at the bottom and right). BatchNorm is zoo's, with
torch's epsilon, momentum and unbiased running variance; dense and convolution layers are
zoo's, which add their bias in float32 under mixed precision (docs/precision.md).
"""

from __future__ import annotations

import math

import keras
from keras import layers, ops

from architectures.resnet.config import STAGES, ResNetConfig
from architectures.resnet.weights import has_downsample
from zoo.nn.keras import Conv2D, Dense
from zoo.nn.keras.norm import BatchNorm
from zoo.nn.keras.remat import checkpointed_call

# torch's kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / (out channels * kh * kw)).
KAIMING_FAN_OUT = keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")


@keras.saving.register_keras_serializable(package="zoo")
class TorchConv2D(Conv2D):
    """A bias-free convolution with torch's ``padding=p``: ``p`` zeros on every side, then "valid".
    (zoo's Conv2D runs a strided 1x1 convolution, a shortcut's downsample, as a subsample and
    a stride-1 one: TensorFlow's oneDNN gradient of the strided 1x1 kernel corrupts the heap.)"""

    def __init__(self, filters: int, kernel_size: int, strides: int = 1, torch_padding: int = 0, **kwargs):
        kwargs.setdefault("kernel_initializer", KAIMING_FAN_OUT)
        super().__init__(filters, kernel_size, strides, "valid", use_bias=False, **kwargs)
        self.torch_padding = torch_padding

    def call(self, inputs):
        p = self.torch_padding
        if p:
            inputs = ops.pad(inputs, ((0, 0), (p, p), (p, p), (0, 0)))
        return super().call(inputs)

    def compute_output_shape(self, input_shape):
        n, h, w, c = input_shape
        h, w = (None if s is None else s + 2 * self.torch_padding for s in (h, w))
        return super().compute_output_shape((n, h, w, c))

    def get_config(self):
        return {**super().get_config(), "torch_padding": self.torch_padding}


def _conv(cout: int, kernel: int, stride: int = 1) -> TorchConv2D:
    """torchvision's conv3x3 / conv1x1: padding kernel // 2."""
    return TorchConv2D(cout, kernel, stride, kernel // 2)


def _bn(cfg: ResNetConfig) -> BatchNorm:
    return BatchNorm(cfg.bn_momentum, cfg.bn_eps)


class MaxPool(layers.Layer):
    """torch's ``MaxPool2d(3, stride=2, padding=1)``.

    torch pads a max pool with -inf; this pads with zeros, which is exact here because the pool
    only ever follows the stem's ReLU: every input is >= 0, and every window holds at least one
    real pixel (a window starts at most one pixel before the image and is 3 wide), so a zero of
    the padding can tie with the window's maximum but never exceed it. The values are therefore
    torch's. So are the gradients: where a padding zero ties with the maximum, the real pixel's
    value is 0, i.e. its ReLU input was <= 0, where ReLU's gradient is 0 in both frameworks
    whichever of the tied elements the pool's gradient is routed to.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pad = layers.ZeroPadding2D(1)
        self.pool = layers.MaxPooling2D(3, strides=2, padding="valid")

    def call(self, x):
        return self.pool(self.pad(x))

    def compute_output_shape(self, input_shape):
        return self.pool.compute_output_shape(self.pad.compute_output_shape(input_shape))


class BasicBlock(layers.Layer):
    """Two 3x3 convolutions (the first with the stage's stride) and the shortcut."""

    def __init__(self, cfg: ResNetConfig, planes: int, stride: int, downsample: bool, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = _conv(planes, 3, stride)
        self.bn1 = _bn(cfg)
        self.conv2 = _conv(planes, 3)
        self.bn2 = _bn(cfg)
        self.downsample = [_conv(planes, 1, stride), _bn(cfg)] if downsample else None

    @property
    def last_bn(self) -> BatchNorm:
        return self.bn2

    def call(self, x, training=False):
        out = ops.relu(self.bn1(self.conv1(x), training=training))
        out = self.bn2(self.conv2(out), training=training)
        return ops.relu(out + _shortcut(self.downsample, x, training))


class Bottleneck(layers.Layer):
    """1x1 down to ``planes``, 3x3 with the stride (v1.5), 1x1 up to 4 x ``planes``, and the shortcut."""

    def __init__(self, cfg: ResNetConfig, planes: int, stride: int, downsample: bool, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = _conv(planes, 1)
        self.bn1 = _bn(cfg)
        self.conv2 = _conv(planes, 3, stride)
        self.bn2 = _bn(cfg)
        self.conv3 = _conv(planes * 4, 1)
        self.bn3 = _bn(cfg)
        self.downsample = [_conv(planes * 4, 1, stride), _bn(cfg)] if downsample else None

    @property
    def last_bn(self) -> BatchNorm:
        return self.bn3

    def call(self, x, training=False):
        out = ops.relu(self.bn1(self.conv1(x), training=training))
        out = ops.relu(self.bn2(self.conv2(out), training=training))
        out = self.bn3(self.conv3(out), training=training)
        return ops.relu(out + _shortcut(self.downsample, x, training))


def _shortcut(downsample: list[layers.Layer] | None, x, training: bool):
    if downsample is None:
        return x
    conv, bn = downsample
    return bn(conv(x), training=training)


BLOCKS: dict[str, type[BasicBlock] | type[Bottleneck]] = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(keras.Model):
    """Input (N, H, W, C) -> logits (N, num_classes).

    With ``grad_checkpointing`` on, training keeps only each residual block's input for
    backward and recomputes the block there, as the torch twin does.
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: ResNetConfig, **kwargs):
        super().__init__(**kwargs)
        self.zoo_config = cfg
        if cfg.stem == "imagenet":
            self.conv1 = TorchConv2D(cfg.width, 7, 2, 3)
        else:
            self.conv1 = _conv(cfg.width, 3)
        self.bn1 = _bn(cfg)
        self.maxpool = MaxPool() if cfg.stem == "imagenet" else None
        cin = cfg.width
        for stage in range(STAGES):
            blocks = []
            for index in range(cfg.layers[stage]):
                stride = cfg.stride(stage) if index == 0 else 1
                downsample = has_downsample(cfg, cin, stage, index)
                blocks.append(BLOCKS[cfg.block](cfg, cfg.planes(stage), stride, downsample))
                cin = cfg.stage_channels(stage)
            setattr(self, f"layer{stage + 1}", blocks)
        self.dropout = layers.Dropout(cfg.dropout)
        bound = 1.0 / math.sqrt(cfg.num_features)  # nn.Linear's default: U(+-1/sqrt(in)) for both
        uniform = keras.initializers.RandomUniform(-bound, bound)
        self.fc = Dense(cfg.num_classes, kernel_initializer=uniform, bias_initializer=uniform)

    def blocks(self) -> list[BasicBlock | Bottleneck]:
        """Every residual block, layer1.0 first."""
        return [block for stage in range(STAGES) for block in getattr(self, f"layer{stage + 1}")]

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x, training=False):
        """(N, H, W, C) -> layer4's map (N, h, w, num_features)."""
        x = ops.relu(self.bn1(self.conv1(x), training=training))
        if self.maxpool is not None:
            x = self.maxpool(x)
        for block in self.blocks():
            if training and self.grad_checkpointing:
                x = checkpointed_call(block, x)
            else:
                x = block(x, training=training)
        return x

    def forward_head(self, x, training=False, pre_logits: bool = False):
        """layer4's map -> logits (or the pooled features, ``pre_logits``)."""
        x = ops.mean(x, axis=(1, 2))
        return x if pre_logits else self.fc(self.dropout(x, training=training))

    def call(self, x, training=False):
        return self.forward_head(self.forward_features(x, training=training), training=training)


def build(cfg: ResNetConfig) -> ResNet:
    model = ResNet(cfg)
    # The variables' shapes do not depend on the image size (the head pools globally), so the
    # smallest image the config accepts builds them at a fraction of a full-size pass's cost.
    side = cfg.total_stride
    model(ops.zeros((1, side, side, cfg.in_channels)))
    if cfg.zero_init_residual:
        for block in model.blocks():
            block.last_bn.gamma.assign(ops.zeros_like(block.last_bn.gamma))
    return model
