"""Token losses and metrics that skip ``IGNORE_INDEX`` labels, and the model that feeds padded
text to a Keras twin.

The formulas are zoo.lightning.task's: cross-entropy ``sum / max(count, 1)`` over the
counted labels, computed in float32, label smoothing as torch's ``cross_entropy`` takes it;
epoch metrics weight each batch by its samples, as
Lightning's epoch sums and Keras' own loss tracker do.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from zoo.data import IGNORE_INDEX


def counted(y_true):
    """(labels with ignored ones replaced by 0, float mask of the counted ones)."""
    y_true = ops.cast(y_true, "int64")
    keep = ops.not_equal(y_true, IGNORE_INDEX)
    return ops.where(keep, y_true, ops.zeros_like(y_true)), ops.cast(keep, "float32")


def cross_entropy(labels, logits, smoothing: float = 0.0):
    """Cross-entropy of each label, in float32. With ``smoothing`` s it is torch's
    ``cross_entropy(label_smoothing=s)`` over C classes: ``(1 - s) * -log p[label] + s * mean_c
    -log p[c]`` (the target puts 1 - s + s/C on the label and s/C on every other class); Keras'
    SparseCategoricalCrossentropy has no label smoothing for sparse labels."""
    logits = ops.cast(logits, "float32")
    if not smoothing:
        return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    log_p = ops.log_softmax(logits, axis=-1)
    picked = ops.take_along_axis(log_p, ops.expand_dims(ops.cast(labels, "int64"), -1), axis=-1)
    return -(1.0 - smoothing) * ops.squeeze(picked, -1) - smoothing * ops.mean(log_p, axis=-1)


def token_cross_entropy(y_true, y_pred, smoothing: float = 0.0):
    labels, keep = counted(y_true)
    nats = cross_entropy(labels, y_pred, smoothing)
    return ops.sum(nats * keep) / ops.maximum(ops.sum(keep), 1.0)


def token_accuracy(y_true, y_pred):
    labels, keep = counted(y_true)
    right = ops.cast(ops.equal(ops.argmax(y_pred, axis=-1), labels), "float32") * keep
    return ops.sum(right) / ops.maximum(ops.sum(keep), 1.0)


class TokenCrossEntropy(keras.losses.Loss):
    """Mean cross-entropy over the counted tokens of a batch.

    ``call`` returns per-token values whose ``sum_over_batch_size`` reduction is that mean
    (each counted token's loss times elements / counted), not the mean itself: Keras divides
    a reduced loss by the replicas in sync only when it reduces it, and returns a scalar
    as it is, so under MirroredStrategy a scalar loss gave summed gradients (2x on two
    replicas) and a doubled loss in the logs. Reduced by Keras, each replica's mean counts
    1/replicas, as DDP averages the processes' gradients."""

    def __init__(self, name: str = "token_cross_entropy", smoothing: float = 0.0):
        super().__init__(name=name, reduction="sum_over_batch_size")
        self.smoothing = smoothing

    def call(self, y_true, y_pred):
        labels, keep = counted(y_true)
        nats = cross_entropy(labels, y_pred, self.smoothing)
        elements = ops.cast(ops.size(keep), "float32")
        return nats * keep * (elements / ops.maximum(ops.sum(keep), 1.0))


class SmoothedCrossEntropy(keras.losses.Loss):
    """A classifier's mean cross-entropy with label smoothing (:func:`cross_entropy`), reduced by
    Keras as its own SparseCategoricalCrossentropy is."""

    def __init__(self, smoothing: float, name: str = "smoothed_cross_entropy"):
        super().__init__(name=name, reduction="sum_over_batch_size")
        self.smoothing = smoothing

    def call(self, y_true, y_pred):
        labels = ops.reshape(ops.cast(y_true, "int64"), ops.shape(y_pred)[:-1])
        return cross_entropy(labels, y_pred, self.smoothing)


class BatchMean(keras.metrics.Mean):
    """The epoch mean of a per-batch value, each batch weighted by its samples."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        weight = ops.cast(ops.shape(y_true)[0], "float32")
        return super().update_state(self.value_of(y_true, y_pred), weight)

    def value_of(self, y_true, y_pred):
        raise NotImplementedError


class TokenBits(BatchMean):
    """A language model's bits per token: the token loss / ln 2 (named ``bpc`` where the tokens
    are characters, ``bpt`` otherwise: zoo.metrics_file.task_metrics)."""

    def value_of(self, y_true, y_pred):
        return token_cross_entropy(y_true, y_pred) / math.log(2)


class Perplexity(BatchMean):
    """exp of the epoch's mean token cross-entropy (2 ** the bits above); trainer.metrics."""

    def value_of(self, y_true, y_pred):
        return token_cross_entropy(y_true, y_pred)

    def result(self):
        return ops.cast(ops.exp(ops.cast(super().result(), "float64")), "float32")


class TokenAccuracy(BatchMean):
    """Share of the counted tokens predicted right."""

    def value_of(self, y_true, y_pred):
        return token_accuracy(y_true, y_pred)


class TextInputs(keras.Model):
    """Feeds a twin the dict batches of padded text: ``ids`` positionally, ``padding_mask`` and
    ``token_type_ids`` (where the data has them) as keywords. It owns no variables: the twin's
    are its variables, in the same order, and the twin is what gets exported."""

    def __init__(self, twin, **kwargs):
        super().__init__(name=f"{twin.name}_text_inputs", **kwargs)
        self.twin = twin
        self.zoo_config = twin.zoo_config

    def call(self, inputs, training=False):
        extra = {key: inputs[key] for key in ("padding_mask", "token_type_ids") if key in inputs}
        return self.twin(inputs["ids"], training=training, **extra)
