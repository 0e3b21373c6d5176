"""Stochastic depth (drop path), the Keras twin of ``zoo.nn.torch.DropPath``."""

from __future__ import annotations

import keras
from keras import layers


@keras.saving.register_keras_serializable(package="zoo")
class DropPath(layers.Dropout):
    """A Keras ``Dropout`` with one mask value per sample: each sample's values are zeroed with
    probability ``rate`` in training and the kept ones scaled by 1 / (1 - rate); the identity in
    evaluation. Being a ``Dropout`` (its ``seed_generator`` drawn per call), it is one of the
    layers whose seeds gradient checkpointing replays (``zoo.nn.keras.remat``)."""

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            shape = (None,) + (1,) * (len(inputs.shape) - 1)
            return keras.random.dropout(inputs, self.rate, noise_shape=shape, seed=self.seed_generator)
        return inputs
