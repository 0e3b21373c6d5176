"""The ViT family's Keras twin: the torch twin's structure and sub-layer names, channels last.

Every default that differs between the frameworks is set explicitly: LayerNorm epsilon
(timm's 1e-6; Keras' is 1e-3) and exact GELU (in ``zoo.nn.keras.Mlp``). Patches are cut by
a strided "valid" convolution on the (N, H, W, C) image; its (N, H/p, W/p, dim) map is read
row by row, the order torch's ``flatten(2).transpose(1, 2)`` gives, so token i is the same
patch in both twins. The class token and the position embedding live in one small layer,
``tokens`` (the weight table's ``tokens.cls_token`` / ``tokens.pos_embed``).
"""

from __future__ import annotations

import math

import keras
from keras import layers, ops

from architectures.vit.config import LAYER_NORM_EPS, ViTConfig, image_shape_message
from zoo.nn.errors import InputError
from zoo.nn.keras import Conv2D, Dense, Mlp, SelfAttention, require
from zoo.nn.keras.remat import checkpointed_call


def _normal(stddev: float) -> keras.initializers.Initializer:
    """timm's ``trunc_normal_(std=stddev)`` truncates at +-2 (absolute), hundreds of standard
    deviations out: it is a normal draw (Keras' TruncatedNormal would cut at 2 std)."""
    return keras.initializers.RandomNormal(stddev=stddev)


def _torch_default(fan_in: int) -> keras.initializers.Initializer:
    bound = 1.0 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


class PatchEmbed(layers.Layer):
    """(N, H, W, C) -> (N, patches, dim)."""

    def __init__(self, cfg: ViTConfig, **kw):
        super().__init__(**kw)
        self.num_patches, self.dim = cfg.num_patches, cfg.dim
        fan_in = cfg.in_channels * cfg.patch_size**2  # nn.Conv2d's default draw, as timm leaves it
        self.proj = Conv2D(
            cfg.dim,
            cfg.patch_size,
            strides=cfg.patch_size,
            padding="valid",
            kernel_initializer=_torch_default(fan_in),
            bias_initializer=_torch_default(fan_in),
        )

    def build(self, input_shape):
        self.proj.build(input_shape)

    def call(self, x):
        return ops.reshape(self.proj(x), (-1, self.num_patches, self.dim))


class Tokens(layers.Layer):
    """Prepends the class token and adds the position embedding: (N, P, dim) -> (N, 1 + P, dim).

    Runs in the layer's dtype (float32 under mixed precision): the patch embedding's output
    joins the float32 residual stream here, as torch's ``cat`` with a float32 class token does.
    """

    def __init__(self, cfg: ViTConfig, **kw):
        super().__init__(**kw)
        self.dim = cfg.dim
        self.cls_token = self.add_weight(shape=(1, 1, cfg.dim), initializer=_normal(1e-6), name="cls_token")
        self.pos_embed = self.add_weight(
            shape=(1, cfg.num_tokens, cfg.dim), initializer=_normal(0.02), name="pos_embed"
        )

    def call(self, x):
        cls = ops.broadcast_to(ops.cast(self.cls_token, x.dtype), (ops.shape(x)[0], 1, self.dim))
        return ops.concatenate([cls, x], axis=1) + ops.cast(self.pos_embed, x.dtype)


class Block(layers.Layer):
    """Pre-norm: ``x + attention(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, cfg: ViTConfig, **kw):
        super().__init__(**kw)
        d = cfg.dim
        self.norm1 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)
        self.attn = SelfAttention(d, cfg.num_heads, dropout=cfg.attn_dropout)
        self.attn.out_proj.kernel_initializer = _normal(0.02)  # timm's draw for every Linear
        self.attn_drop = layers.Dropout(cfg.dropout)  # timm's proj_drop, after the output projection
        self.norm2 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)
        self.mlp = Mlp(
            d,
            cfg.mlp_hidden,
            hidden_dropout=cfg.dropout,
            output_dropout=cfg.dropout,
            kernel_initializer=_normal(0.02),
            bias_initializer="zeros",
        )

    def build(self, input_shape):
        """Every sub-layer from the (N, tokens, dim) shape: no symbolic trace of :meth:`call`."""
        for layer in (self.norm1, self.attn, self.norm2, self.mlp):
            layer.build(input_shape)

    def call(self, x, training=False):
        x = x + self.attn_drop(self.attn(self.norm1(x), training=training), training=training)
        return x + self.mlp(self.norm2(x), training=training)


class VisionTransformer(keras.Model):
    """(N, image_size, image_size, in_channels) float -> (N, num_classes) logits.

    ``forward_features`` and ``forward_head`` as in the torch twin (timm's interface). Images
    of another shape are refused with the torch twin's :class:`zoo.nn.errors.InputError`
    (inside a graph whose shapes are unknown until it runs, the step fails with its message).

    With ``grad_checkpointing`` on, training keeps only each block's input for backward and
    recomputes the block there, with the forward pass's dropout masks (``zoo.nn.keras.remat``).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: ViTConfig, **kw):
        super().__init__(**kw)
        self.zoo_config = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.tokens = Tokens(cfg)
        self.pos_drop = layers.Dropout(cfg.pos_dropout)
        self.blocks = [Block(cfg) for _ in range(cfg.depth)]
        self.norm = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)
        self.head_drop = layers.Dropout(cfg.head_dropout)
        self.head = Dense(cfg.num_classes, kernel_initializer=_normal(0.02), bias_initializer="zeros")

    def build(self, input_shape):
        """Every layer from the image shape, without Keras' symbolic trace of :meth:`call` (the
        image size is fixed by the position embedding, so no smaller image would do)."""
        cfg = self.zoo_config
        tokens = (input_shape[0], cfg.num_tokens, cfg.dim)
        self.patch_embed.build(input_shape)
        for block in self.blocks:
            block.build(tokens)
        self.norm.build(tokens)
        self.head.build((input_shape[0], cfg.dim))

    def forward_features(self, x, training=False):
        h = self.tokens(self.patch_embed(self._checked(x)))
        h = self.pos_drop(h, training=training)
        checkpointing = training and self.grad_checkpointing
        for block in self.blocks:
            h = checkpointed_call(block, h) if checkpointing else block(h, training=training)
        return self.norm(h)

    def forward_head(self, h, training=False, pre_logits: bool = False):
        """The class token's features (``pre_logits``) or the logits."""
        pooled = self.head_drop(h[:, 0], training=training)
        return pooled if pre_logits else self.head(pooled)

    def call(self, x, training=False):
        return self.forward_head(self.forward_features(x, training=training), training=training)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def _checked(self, x):
        """``x`` if it is an (N, image_size, image_size, in_channels) batch; refused otherwise."""
        cfg = self.zoo_config
        want = (cfg.image_size, cfg.image_size, cfg.in_channels)
        got = tuple(x.shape[1:])
        canonical = lambda dims: (dims[2], dims[0], dims[1])  # noqa: E731 - the message's C x H x W
        if None not in got:
            if got != want:
                raise InputError(image_shape_message(cfg, canonical(got)))
            return x
        shape = ops.shape(x)
        fits = ops.all(ops.stack([ops.equal(shape[i + 1], w) for i, w in enumerate(want)]))
        shown = canonical(tuple("?" if d is None else d for d in got))
        return require(fits, image_shape_message(cfg, shown), x)


def _init_attention_like_timm(model: VisionTransformer) -> None:
    """timm draws its ``qkv`` projection from the same normal as every other Linear; zoo's
    shared Keras attention creates it with ``nn.MultiheadAttention``'s Xavier-uniform, so it is
    redrawn here (the output projection got its initialiser in :class:`Block`)."""
    for block in model.blocks:
        variable = block.attn.in_proj_kernel
        variable.assign(keras.random.normal(tuple(variable.shape), stddev=0.02, dtype=variable.dtype))


def build(cfg: ViTConfig) -> VisionTransformer:
    """Built explicitly from the input shape, with no forward pass: a full-size call of a large
    ViT costs seconds, and no variable needs one."""
    model = VisionTransformer(cfg)
    model.build((None, cfg.image_size, cfg.image_size, cfg.in_channels))
    _init_attention_like_timm(model)
    return model
