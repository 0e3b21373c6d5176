"""The recurrent net every recurrent family's Keras twin is: the torch twin's
(:mod:`zoo.nn.torch.recurrent`) structure and attribute names, over layers the family supplies
(:mod:`zoo.nn.keras.recurrent_cells`).

Inputs are batch-first as in torch. Each recurrent layer is a ``keras.layers.RNN`` (or
Keras' GRU), wrapped in ``Bidirectional`` when configured; its cell is reached as
``recurrent.{i}.cell`` or ``recurrent.{i}.forward_layer.cell`` / ``backward_layer.cell``.
Keras' own SimpleRNN and LSTM cells have one bias where torch has two, so zoo's cells
keep both (see :mod:`zoo.nn.recurrent_ports`).

A padded batch is masked: Keras' recurrent layers carry the state over masked steps, so a
backward layer starts at each sequence's own last step as torch's packed layer does, and
padded steps are written as zeros as torch's ``pad_packed_sequence`` writes them.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
from keras import layers, ops

from zoo.nn.keras.embedding import Embedding
from zoo.nn.keras.init import torch_recurrent_init
from zoo.nn.keras.linear import Dense, add_bias
from zoo.nn.keras.remat import checkpointed_call
from zoo.nn.recurrent_config import LANGUAGE_MODELING_STEPS, RecurrentConfig

# () -> a Keras recurrent layer returning the whole sequence
LayerFactory = Callable[[], layers.Layer]


@keras.saving.register_keras_serializable(package="zoo")
class TiedHead(keras.layers.Layer):
    """A linear head whose weight is passed in (the token embedding); it keeps only a bias."""

    low_precision_products = True

    def __init__(self, outputs: int, **kwargs):
        super().__init__(**kwargs)
        self.outputs = outputs

    def build(self, x_shape, embeddings_shape=None):
        self.bias = self.add_weight(shape=(self.outputs,), initializer="zeros", name="bias")

    def call(self, x, embeddings):
        kernel = ops.cast(ops.transpose(embeddings), self.compute_dtype)
        return add_bias(ops.matmul(ops.cast(x, self.compute_dtype), kernel), self.bias)

    def get_config(self):
        return {**super().get_config(), "outputs": self.outputs}


class RecurrentNet(keras.Model):
    """Classification: (N, T, input_size) float or (N, T) token ids -> (N, num_classes).
    Language modeling: (N, T) int token ids -> (N, T, vocab_size).

    ``padding_mask`` (N, T) bool marks padding with True, at the end of each row.

    With ``grad_checkpointing`` on, training keeps only each recurrent layer's input for
    backward and reruns the layer there, as the torch twin does.
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: RecurrentConfig, make_layer: LayerFactory, **kwargs):
        super().__init__(**kwargs)
        self.zoo_config = cfg
        # torch's defaults (nn.Embedding N(0, 1), nn.Linear U(+-1/sqrt(fan_in))), not Keras':
        # Keras' small uniform embedding starts a character model far slower. zoo's Embedding
        # refuses ids outside the vocabulary (Keras' own wraps a negative id round) as torch does.
        self.embedding = (
            Embedding(
                cfg.vocab_size,
                cfg.embedding_dim,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
            )
            if cfg.reads_tokens
            else None
        )
        self.recurrent = [
            layers.Bidirectional(make_layer(), merge_mode="concat") if cfg.bidirectional else make_layer()
            for _ in range(cfg.num_layers)
        ]
        self.dropout = layers.Dropout(cfg.dropout)
        features = cfg.hidden_size * (2 if cfg.bidirectional else 1)
        self.head = (
            TiedHead(cfg.output_size)
            if cfg.tie_embeddings
            else Dense(
                cfg.output_size,
                kernel_initializer=torch_recurrent_init(features),
                bias_initializer=torch_recurrent_init(features),
            )
        )

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x, padding_mask=None, training=False):
        if self.embedding is not None:
            x = self.dropout(self.embedding(x), training=training)
        keep = None if padding_mask is None else ops.logical_not(ops.cast(padding_mask, "bool"))
        checkpointing = training and self.grad_checkpointing
        for index, layer in enumerate(self.recurrent):
            if index:
                x = self.dropout(x, training=training)
            if checkpointing:
                x = checkpointed_call(layer, x, mask=keep)
            else:
                x = layer(x, mask=keep, training=training)
            if keep is not None:
                x = x * ops.cast(keep, x.dtype)[..., None]
        return x

    def forward_head(self, x, padding_mask=None, training=False):
        cfg = self.zoo_config
        if not cfg.language_model:
            x = pool(x, cfg, padding_mask)
        x = self.dropout(x, training=training)
        return self.head(x, self.embedding.embeddings) if cfg.tie_embeddings else self.head(x)

    def call(self, x, padding_mask=None, training=False):
        features = self.forward_features(x, padding_mask, training=training)
        return self.forward_head(features, padding_mask, training=training)


def pool(x, cfg: RecurrentConfig, padding_mask=None):
    """(N, T, D) -> (N, D), as the torch twin's ``pool``."""
    if padding_mask is None:
        if cfg.pooling == "mean":
            return ops.mean(x, axis=1)
        last = x[:, -1]
    else:
        keep = ops.cast(ops.logical_not(ops.cast(padding_mask, "bool")), x.dtype)[..., None]
        if cfg.pooling == "mean":
            return ops.sum(x * keep, axis=1) / ops.sum(keep, axis=1)
        ends = ops.cast(ops.sum(keep, axis=(1, 2)), "int32") - 1  # each row's last real step
        last = ops.take_along_axis(x, ends[:, None, None], axis=1)[:, 0]
    if not cfg.bidirectional:
        return last
    h = cfg.hidden_size
    return ops.concatenate([last[:, :h], x[:, 0, h:]], axis=-1)


def build_model(cfg: RecurrentConfig, make_layer: LayerFactory) -> RecurrentNet:
    """A built twin: called once on a dummy batch of the right dtype and shape."""
    model = RecurrentNet(cfg, make_layer)
    if cfg.language_model:
        model(ops.zeros((1, LANGUAGE_MODELING_STEPS), dtype="int32"))
    elif cfg.reads_tokens:
        model(ops.zeros((1, *cfg.sample_shape()), dtype="int32"))
    else:
        model(ops.zeros((1, *cfg.sample_shape())))
    return model
