"""The transformer family's Keras twin: the torch twin's structure and sub-layer names.

Every default that differs between the frameworks is set explicitly: LayerNorm epsilon
(Keras' is 1e-3) and exact GELU. Attention is zoo's own (``zoo.nn.keras.SelfAttention``),
not ``keras.layers.MultiHeadAttention``, whose bias addition is wrong on TensorFlow when
a head has one feature (docs/keras-bias-add-bug.md); masks are "blocked" masks, True
where attention is not allowed, as in the torch twin.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.transformer.config import TransformerConfig
from zoo.nn.errors import InputError, sequence_length_message
from zoo.nn.keras import Dense, Embedding, SelfAttention, blocked_mask, require
from zoo.nn.keras.activations import activation
from zoo.nn.keras.remat import checkpointed_call


class Block(layers.Layer):
    """Self-attention and a feed-forward net, each a residual branch, pre- or post-norm."""

    def __init__(self, cfg: TransformerConfig, **kw):
        super().__init__(**kw)
        d = cfg.d_model
        self.norm_first = cfg.norm_first
        self.norm1 = layers.LayerNormalization(epsilon=cfg.layer_norm_eps)
        self.attn = SelfAttention(d, cfg.num_heads, dropout=cfg.dropout)
        self.norm2 = layers.LayerNormalization(epsilon=cfg.layer_norm_eps)
        self.ff1 = Dense(cfg.ff_dim)
        self.act = activation(cfg.activation)
        self.dropout = layers.Dropout(cfg.dropout)  # on the feed-forward hidden layer
        self.ff2 = Dense(d)
        self.dropout1 = layers.Dropout(cfg.dropout)  # on the attention branch
        self.dropout2 = layers.Dropout(cfg.dropout)  # on the feed-forward branch
        self.ff_dim = cfg.ff_dim

    def build(self, input_shape):
        """Every sub-layer from the (N, T, d_model) shape: no symbolic trace of :meth:`call`."""
        for layer in (self.norm1, self.attn, self.norm2, self.ff1):
            layer.build(input_shape)
        self.ff2.build((*input_shape[:-1], self.ff_dim))

    def call(self, x, blocked=None, training=False):
        """``blocked``: True where attention is blocked, (T, T) or (N, 1, T, T)."""
        if self.norm_first:
            x = x + self._attend(self.norm1(x), blocked, training)
            return x + self._feed_forward(self.norm2(x), training)
        x = self.norm1(x + self._attend(x, blocked, training))
        return self.norm2(x + self._feed_forward(x, training))

    def _attend(self, x, blocked, training):
        return self.dropout1(self.attn(x, blocked, training=training), training=training)

    def _feed_forward(self, x, training):
        hidden = self.dropout(self.act(self.ff1(x)), training=training)
        return self.dropout2(self.ff2(hidden), training=training)


class Transformer(keras.Model):
    """Classification: (N, T, input_size) float -> (N, num_classes).
    Language modelling: (N, T) integer ids -> (N, T, vocab_size), causal.

    ``padding_mask`` (N, T) bool marks padding with True, as in the torch twin; as
    there, a padding step attends to itself too, so no attention row is empty. Token ids
    outside the vocabulary and sequences longer than ``max_len`` are refused with the torch
    twin's :class:`zoo.nn.errors.InputError` (inside a graph: the step fails with its message).

    With ``grad_checkpointing`` on, training keeps only each block's input for backward and
    recomputes the block there, with the forward pass's dropout masks (``zoo.nn.keras.remat``).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: TransformerConfig, **kw):
        super().__init__(**kw)
        self.zoo_config = cfg
        d = cfg.d_model
        small = keras.initializers.RandomNormal(stddev=0.02)
        if cfg.causal:
            self.embed = Embedding(cfg.vocab_size, d, embeddings_initializer=small)
        else:
            self.embed = Dense(d)
        if cfg.positions == "learned":
            self.pos_embed = layers.Embedding(cfg.max_len, d, embeddings_initializer=small)
            self.pos_table = None
        else:
            self.pos_embed = None
            self.pos_table = cfg.sinusoidal_table()  # a constant, not a variable: not in the checkpoint
        self.dropout = layers.Dropout(cfg.dropout)
        self.blocks = [Block(cfg) for _ in range(cfg.num_layers)]
        self.norm = layers.LayerNormalization(epsilon=cfg.layer_norm_eps) if cfg.norm_first else None
        self.head = Dense(cfg.outputs)

    def build(self, x_shape, padding_mask_shape=None):
        """Every layer from the input's shape: no variable depends on the sequence length, and
        an explicit build spares Keras' symbolic trace of the whole model before its first call."""
        cfg = self.zoo_config
        hidden = (*x_shape[:2], cfg.d_model)
        self.embed.build(x_shape)
        if self.pos_embed is not None:
            self.pos_embed.build(x_shape[:2])
        for block in self.blocks:
            block.build(hidden)
        if self.norm is not None:
            self.norm.build(hidden)
        self.head.build(hidden)

    def forward_features(self, x, padding_mask=None, training=False):
        """The final hidden states (N, T, d_model), after the final norm of pre-norm models."""
        max_len = self.zoo_config.max_len
        steps = x.shape[1]
        if steps is None:  # known only when the graph runs
            steps = ops.shape(x)[1]
            steps, x = require(steps <= max_len, sequence_length_message(max_len), steps, x)
        elif steps > max_len:
            raise InputError(sequence_length_message(max_len, steps))
        h = self.embed(x)
        if self.pos_embed is not None:
            positions = self.pos_embed(ops.arange(steps))
        else:
            positions = ops.convert_to_tensor(self.pos_table)[:steps]
        h = self.dropout(h + ops.cast(positions, h.dtype), training=training)
        blocked = blocked_mask(steps, padding_mask, self.zoo_config.causal)
        checkpointing = training and self.grad_checkpointing
        for block in self.blocks:
            h = (
                checkpointed_call(block, h, blocked)
                if checkpointing
                else block(h, blocked, training=training)
            )
        return h if self.norm is None else self.norm(h)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_head(self, h, padding_mask=None):
        if self.zoo_config.causal:
            return self.head(h)
        if self.zoo_config.pooling == "first":
            return self.head(h[:, 0])
        if padding_mask is None:
            return self.head(ops.mean(h, axis=1))
        keep = ops.cast(ops.logical_not(ops.cast(padding_mask, "bool")), h.dtype)[..., None]
        pooled = ops.sum(h * keep, axis=1) / ops.maximum(ops.sum(keep, axis=1), 1.0)
        return self.head(pooled)

    def call(self, x, padding_mask=None, training=False):
        return self.forward_head(self.forward_features(x, padding_mask, training=training), padding_mask)


def build(cfg: TransformerConfig) -> Transformer:
    """Built explicitly from the input's shape, with no forward pass: no variable's shape depends
    on the sequence length, and a full-context first call cost seconds (Keras traced it twice)."""
    model = Transformer(cfg)
    model.build((None, None) if cfg.causal else (None, None, cfg.input_size))
    return model
