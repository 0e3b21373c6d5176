"""tf.data pipelines that yield zoo's seeded batch order, channels last."""

from __future__ import annotations

import numpy as np

from zoo.data import Split, epoch_order


def keras_layout(x: np.ndarray, input_kind: str) -> np.ndarray:
    """Canonical (torch) layout -> Keras layout: images move their channels last."""
    return np.ascontiguousarray(np.moveaxis(x, 1, -1)) if input_kind == "image" else x


def train_dataset(
    split: Split,
    batch_size: int,
    seed: int,
    shuffle: bool,
    epochs: int,
    input_kind: str,
    start_epoch: int = 0,
    skip: int = 0,
):
    """Epochs ``start_epoch`` .. ``epochs - 1`` as one stream (fit reads it with
    ``steps_per_epoch``), prefetched, the first ``skip`` batches left out (a resume).

    The order of epoch ``e`` is ``zoo.data.epoch_order(n, seed, e)``; batches never
    straddle two epochs, exactly as in the torch DataLoader.
    """
    import tensorflow as tf

    orders = np.stack([epoch_order(len(split), seed, e, shuffle) for e in range(start_epoch, epochs)])
    x = tf.constant(keras_layout(split.x, input_kind))
    y = tf.constant(split.y)
    batches = tf.data.Dataset.from_tensor_slices(orders).flat_map(
        lambda order: tf.data.Dataset.from_tensor_slices(order).batch(batch_size)
    )
    if skip:
        batches = batches.skip(skip)
    gathered = batches.map(lambda index: (tf.gather(x, index), tf.gather(y, index)))
    return gathered.prefetch(tf.data.AUTOTUNE)


def eval_dataset(split: Split, batch_size: int, input_kind: str):
    import tensorflow as tf

    data = (keras_layout(split.x, input_kind), split.y)
    return tf.data.Dataset.from_tensor_slices(data).batch(batch_size).prefetch(tf.data.AUTOTUNE)
