"""Keras metrics that zoo's tasks report and Keras lacks, and trainer.metrics' (zoo.metrics_file
says what each is): top-k accuracy is Keras' own, macro F1 and perplexity are zoo's."""

from __future__ import annotations

import math

import keras
from keras import ops


class BitsPerCharacter(keras.metrics.Mean):
    """Mean next-token cross-entropy in bits (the Lightning task logs the same)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        nats = keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
        return super().update_state(ops.mean(nats, axis=-1) / math.log(2), sample_weight)


class MacroF1(keras.metrics.Metric):
    """Macro F1 over the epoch: per-class true positives, false positives and false negatives
    counted in float64 over every batch (the Lightning task keeps the same counts), then
    2tp / (2tp + fp + fn) averaged over the classes that occur among the labels or predictions."""

    def __init__(self, classes: int, name: str = "macro_f1", **kwargs):
        super().__init__(name=name, **kwargs)
        self.classes = classes
        self.counts = self.add_variable(
            shape=(3, classes), initializer="zeros", dtype="float64", name="counts"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.one_hot(ops.reshape(ops.cast(y_true, "int32"), (-1,)), self.classes, dtype="float64")
        predicted = ops.one_hot(ops.argmax(y_pred, axis=-1), self.classes, dtype="float64")
        right = ops.sum(labels * predicted, axis=0)
        found = ops.stack([right, ops.sum(predicted, axis=0) - right, ops.sum(labels, axis=0) - right])
        self.counts.assign_add(found)

    def result(self):
        tp, fp, fn = self.counts[0], self.counts[1], self.counts[2]
        seen = ops.cast((tp + fp + fn) > 0, "float64")
        f1 = ops.divide_no_nan(2 * tp, 2 * tp + fp + fn)
        return ops.cast(ops.divide_no_nan(ops.sum(f1 * seen), ops.sum(seen)), "float32")

    def get_config(self):
        return {**super().get_config(), "classes": self.classes}
