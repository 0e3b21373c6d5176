"""Keras metrics that zoo's tasks report and Keras lacks."""

from __future__ import annotations

import math

import keras
from keras import ops


class BitsPerCharacter(keras.metrics.Mean):
    """Mean next-token cross-entropy in bits (the Lightning task logs the same)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        nats = keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
        return super().update_state(ops.mean(nats, axis=-1) / math.log(2), sample_weight)
