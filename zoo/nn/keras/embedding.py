"""A token embedding that refuses ids outside the vocabulary, with the torch twin's message.

Keras' ``Embedding`` reads a negative id from the end of the table on TensorFlow (its
``take`` wraps negative indices) and leaves an id past the end to TensorFlow's gather,
which fails on the CPU in its own words and returns zeros on a GPU. The torch twin raises
for both. This layer checks first and raises the same :class:`zoo.nn.errors.InputError`
(in a graph: fails the step with it, see ``zoo.nn.keras.checks``).
"""

from __future__ import annotations

import keras
from keras import ops

from zoo.nn.errors import token_ids_message
from zoo.nn.keras.checks import require


def checked_token_ids(ids, vocab_size: int):
    """``ids`` as a tensor, checked to lie in [0, vocab_size)."""
    ids = ops.convert_to_tensor(ids)
    inside = ops.all(ops.logical_and(ids >= 0, ids < vocab_size))
    return require(inside, token_ids_message(vocab_size), ids)


class Embedding(keras.layers.Embedding):
    """``keras.layers.Embedding`` (same ``embeddings`` variable) whose lookup checks the ids."""

    def call(self, inputs):
        return super().call(checked_token_ids(inputs, self.input_dim))


class PaddedEmbedding(Embedding):
    """zoo's checked ``Embedding`` whose ``pad_id`` row gets no gradient from the lookup
    (torch's ``padding_idx``) and starts at zero."""

    def __init__(self, input_dim: int, output_dim: int, pad_id: int | None, **kwargs):
        super().__init__(input_dim, output_dim, **kwargs)
        self.pad_id = pad_id

    def build(self, input_shape=None):
        super().build(input_shape)
        if self.pad_id is not None:
            rows = ops.arange(self.input_dim)[:, None] == self.pad_id
            self.embeddings.assign(ops.where(rows, 0.0, self.embeddings))

    def call(self, inputs):
        vectors = super().call(inputs)
        if self.pad_id is None:
            return vectors
        padding = ops.equal(inputs, self.pad_id)[..., None]
        return ops.where(padding, ops.stop_gradient(vectors), vectors)
