"""Task heads, the Keras twins of ``zoo.nn.torch.heads`` step for step (same sub-layer names).

The dense layers are zoo's (bias added in float32 under mixed precision, docs/precision.md);
GELU is the exact erf form (``zoo.nn.keras.mlp.ACTIVATIONS``). The masked-LM decoder reads
the word embedding variable passed in at call time, so it is one variable in the model,
as the tied tensor is one in the checkpoint.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from zoo.nn.keras.linear import Dense, add_bias
from zoo.nn.keras.mlp import ACTIVATIONS
from zoo.nn.keras.norm import LayerNorm


def _normal(std: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=std)


class ClassificationHead(layers.Layer):
    """(..., in_features) -> (..., num_classes): ``dropout``, then ``classifier`` (a Dense)."""

    def __init__(self, num_classes: int, dropout: float = 0.0, init_std: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.dropout = layers.Dropout(dropout)
        self.classifier = Dense(num_classes, kernel_initializer=_normal(init_std), bias_initializer="zeros")

    def build(self, input_shape):
        self.classifier.build(input_shape)

    def call(self, x, training=False):
        return self.classifier(self.dropout(x, training=training))


class MaskedLMHead(layers.Layer):
    """(N, T, hidden) -> (N, T, vocab) logits, decoded with the (vocab, hidden) ``embedding``
    passed to :meth:`call` (the word embedding table). Variables: ``bias`` (vocab,), ``dense``,
    ``norm``, as the torch twin's tensors."""

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        layer_norm_eps: float,
        activation: str = "gelu",
        init_std: float = 0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of: {', '.join(ACTIVATIONS)}")
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.dense = Dense(hidden_size, kernel_initializer=_normal(init_std), bias_initializer="zeros")
        self.act = ACTIVATIONS[activation]
        self.norm = LayerNorm(epsilon=layer_norm_eps)

    def build(self, h_shape, embedding_shape=None):
        self.bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="bias")
        self.dense.build((*h_shape[:-1], self.hidden_size))
        self.norm.build((*h_shape[:-1], self.hidden_size))

    def call(self, h, embedding):
        if tuple(embedding.shape) != (self.vocab_size, self.hidden_size):
            raise ValueError(
                f"the decoder matrix must be the ({self.vocab_size}, {self.hidden_size}) word embedding; "
                f"got {tuple(embedding.shape)}"
            )
        x = self.norm(self.act(self.dense(h)))
        logits = ops.matmul(x, ops.transpose(ops.cast(embedding, x.dtype)))
        return add_bias(logits, self.bias)


class TiedProduct(layers.Layer):
    """(..., hidden) -> (..., vocab): a product with a (vocab, hidden) matrix passed in at call time
    (a tied LM head: the token embedding), owning no variable. A product layer: under mixed
    precision both sides are rounded to the low dtype, as torch's autocast rounds ``F.linear``."""

    low_precision_products = True

    def call(self, h, matrix):
        dtype = self.compute_dtype
        return ops.matmul(ops.cast(h, dtype), ops.transpose(ops.cast(matrix, dtype)))


def mean_pool(hidden, padding_mask=None):
    """(N, T, H) -> (N, H): the mean over non-padding tokens, as ``zoo.nn.torch.heads.mean_pool``."""
    if padding_mask is None:
        return ops.mean(hidden, axis=1)
    keep = ops.cast(ops.logical_not(ops.cast(padding_mask, "bool")), hidden.dtype)[..., None]
    return ops.sum(hidden * keep, axis=1) / ops.maximum(ops.sum(keep, axis=1), 1e-9)
