"""The CNN family's Keras twin: the torch twin's structure and sub-layer names, channels last.

Padding is explicit where it matters: for stride 2, TensorFlow's "same" pads only
bottom/right while torch pads both sides, so strided convs get a ZeroPadding2D first.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.cnn.config import CNNConfig
from zoo.nn.keras import Conv2D, Dense
from zoo.nn.keras.activations import activation
from zoo.nn.keras.norm import BatchNorm
from zoo.nn.keras.remat import checkpointed_call


class ConvBN(layers.Layer):
    def __init__(self, cfg: CNNConfig, cout: int, kernel: int, stride: int, act: bool, **kw):
        super().__init__(**kw)
        pad = kernel // 2
        self.pad = layers.ZeroPadding2D(pad) if stride != 1 and pad else None
        padding = "valid" if self.pad is not None or pad == 0 else "same"
        self.conv = Conv2D(cout, kernel, stride, padding, use_bias=not cfg.batch_norm)
        self.bn = BatchNorm(cfg.bn_momentum, cfg.bn_eps) if cfg.batch_norm else None
        self.act = activation(cfg.activation) if act else None

    def call(self, x, training=False):
        if self.pad is not None:
            x = self.pad(x)
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x, training=training)
        return x if self.act is None else self.act(x)


class ResidualBlock(layers.Layer):
    def __init__(self, cfg: CNNConfig, cin: int, cout: int, stride: int, **kw):
        super().__init__(**kw)
        k = cfg.kernel_size
        self.first = ConvBN(cfg, cout, k, stride, act=True)
        self.second = ConvBN(cfg, cout, k, 1, act=False)
        needs_projection = stride != 1 or cin != cout
        self.shortcut = ConvBN(cfg, cout, 1, stride, act=False) if needs_projection else None
        self.act = activation(cfg.activation)

    def call(self, x, training=False):
        skip = x if self.shortcut is None else self.shortcut(x, training=training)
        y = self.second(self.first(x, training=training), training=training)
        return self.act(y + skip)


class Head(layers.Layer):
    def __init__(self, cfg: CNNConfig, **kw):
        super().__init__(**kw)
        self.pool = cfg.head
        self.dropout = layers.Dropout(cfg.dropout)
        self.hidden = Dense(cfg.hidden) if cfg.hidden else None
        self.act = activation(cfg.activation)
        self.fc = Dense(cfg.num_classes)

    def call(self, x, training=False):
        x = ops.mean(x, axis=(1, 2)) if self.pool == "avgpool" else ops.reshape(x, (ops.shape(x)[0], -1))
        if self.hidden is not None:
            x = self.act(self.hidden(self.dropout(x, training=training)))
        return self.fc(self.dropout(x, training=training))


class CNN(keras.Model):
    """Input (N, H, W, C) -> logits (N, num_classes).

    With ``grad_checkpointing`` on, training keeps only the input of the stem and of each
    block for backward and recomputes the rest there, as the torch twin does.
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: CNNConfig, **kw):
        super().__init__(**kw)
        self.zoo_config = cfg
        self.stem = ConvBN(cfg, cfg.stem_width, cfg.kernel_size, 1, act=True)
        self.stages = []
        cin = cfg.stem_width
        for s, cout in enumerate(cfg.channels):
            blocks = []
            for stride in cfg.strides(s):
                if cfg.residual:
                    blocks.append(ResidualBlock(cfg, cin, cout, stride))
                else:
                    blocks.append(ConvBN(cfg, cout, cfg.kernel_size, stride, act=True))
                cin = cout
            self.stages.append(blocks)
        self.pool = layers.MaxPooling2D(2) if cfg.downsample == "maxpool" else None
        self.head = Head(cfg)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x, training=False):
        x = self._block(self.stem, x, training)
        for stage in self.stages:
            for block in stage:
                x = self._block(block, x, training)
            if self.pool is not None:
                x = self.pool(x)
        return x

    def _block(self, block: layers.Layer, x, training):
        if training and self.grad_checkpointing:
            return checkpointed_call(block, x)
        return block(x, training=training)

    def call(self, x, training=False):
        return self.head(self.forward_features(x, training=training), training=training)


def build(cfg: CNNConfig) -> CNN:
    model = CNN(cfg)
    model(ops.zeros((1, cfg.image_size, cfg.image_size, cfg.in_channels)))
    return model
