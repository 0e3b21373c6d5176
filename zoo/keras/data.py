"""tf.data pipelines that yield zoo's seeded batch order, channels last.

In-memory arrays become constants gathered batch by batch. Image files (``ImageFiles``)
are decoded by the same numpy/PIL code as on the torch side, called through
``tf.numpy_function`` in a parallel, order-keeping map (PIL releases the GIL while it
decodes and resizes), and prefetched.
"""

from __future__ import annotations

import numpy as np

from zoo.data import Split, epoch_order
from zoo.data.image_files import ImageFiles


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

    if isinstance(split.x, ImageFiles):
        return decoded_train_dataset(split, batch_size, seed, shuffle, epochs, start_epoch, skip)
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

    if isinstance(split.x, ImageFiles):
        keys = tf.data.Dataset.range(len(split)).batch(batch_size)
        return decoded(keys.map(lambda index: (tf.constant(-1, tf.int64), index)), split, seed=0)
    data = (keras_layout(split.x, input_kind), split.y)
    return tf.data.Dataset.from_tensor_slices(data).batch(batch_size).prefetch(tf.data.AUTOTUNE)


def decoded_train_dataset(
    split: Split, batch_size: int, seed: int, shuffle: bool, epochs: int, start_epoch: int, skip: int
):
    """The (epoch, index) keys of zoo's batch order, one epoch's order made when the stream
    reaches it, decoded (and augmented) batch by batch."""
    import tensorflow as tf

    n = len(split)

    def order(epoch):
        return epoch_order(n, seed, int(epoch), shuffle)

    def batches(epoch):
        indices = tf.ensure_shape(tf.numpy_function(order, [epoch], tf.int64, stateful=False), [n])
        return tf.data.Dataset.from_tensor_slices(indices).batch(batch_size).map(lambda index: (epoch, index))

    keys = tf.data.Dataset.range(start_epoch, epochs).flat_map(batches)
    return decoded(keys.skip(skip) if skip else keys, split, seed)


def decoded(keys, split: Split, seed: int):
    """Keys (epoch, index) -> (images, labels), channels last; epoch -1: not augmented."""
    import tensorflow as tf

    images: ImageFiles = split.x  # type: ignore[assignment]
    labels = split.y
    _, channels, size, _ = images.shape

    def read(epoch, index):
        epoch = int(epoch)
        x = images.batch(index, seed, epoch if epoch >= 0 else None, channels_last=True)
        return x, labels[index]

    def decode(epoch, index):
        x, y = tf.numpy_function(read, [epoch, index], [tf.float32, tf.int64], stateful=False)
        return tf.ensure_shape(x, [None, size, size, channels]), tf.ensure_shape(y, [None])

    calls = images.workers or None  # None: one call at a time, in the order of the keys
    return keys.map(decode, num_parallel_calls=calls, deterministic=True).prefetch(tf.data.AUTOTUNE)
