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
