"""tf.data pipelines that yield zoo's seeded batch order, channels last.

In-memory arrays become constants gathered batch by batch. Image files (``ImageFiles``)
are decoded by the same numpy/PIL code as on the torch side, called through
``tf.numpy_function`` in a parallel, order-keeping map (PIL releases the GIL while it
decodes and resizes), and prefetched. Padded text comes as ``({"ids", "padding_mask",
"token_type_ids"}, labels)`` (:class:`zoo.keras.losses.TextInputs` hands it to the twin);
masked-LM batches are masked by zoo.data.masking through ``tf.numpy_function``, as in torch.
"""

from __future__ import annotations

import numpy as np

from zoo.data import Split, epoch_order
from zoo.data.image_files import ImageFiles
from zoo.data.stream import Stream


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
    share: tuple[int, int] = (0, 1),
):
    """Epochs ``start_epoch`` .. ``epochs - 1`` as one stream (fit reads it with
    ``steps_per_epoch``), prefetched, the first ``skip`` batches left out (a resume).

    The order of epoch ``e`` is ``zoo.data.epoch_order(n, seed, e)``; batches never
    straddle two epochs, exactly as in the torch DataLoader. A streamed split reads its own
    order; ``share`` (rank, world) is a multi-worker process's part of every batch.
    """
    import tensorflow as tf

    if isinstance(split.x, Stream):
        keys = stream_keys(len(split), batch_size, epochs, start_epoch, skip, share)
        return streamed(keys, split.x, seed)
    if isinstance(split.x, ImageFiles) or split.masking is not None:
        return decoded_train_dataset(split, batch_size, seed, shuffle, epochs, start_epoch, skip)
    orders = np.stack([epoch_order(len(split), seed, e, shuffle) for e in range(start_epoch, epochs)])
    x = tf.constant(keras_layout(split.x, input_kind))
    y = tf.constant(split.y)
    batches = tf.data.Dataset.from_tensor_slices(orders).flat_map(
        lambda order: tf.data.Dataset.from_tensor_slices(order).batch(batch_size)
    )
    if skip:
        batches = batches.skip(skip)
    if split.has_text_inputs:
        extras = {k: tf.constant(v) for k, v in text_extras(split).items()}

        def gather(index):
            inputs = {"ids": tf.gather(x, index)} | {k: tf.gather(v, index) for k, v in extras.items()}
            return inputs, tf.gather(y, index)

        return batches.map(gather).prefetch(tf.data.AUTOTUNE)
    gathered = batches.map(lambda index: (tf.gather(x, index), tf.gather(y, index)))
    return gathered.prefetch(tf.data.AUTOTUNE)


def text_extras(split: Split) -> dict[str, np.ndarray]:
    """The keyword inputs of a padded text split, by the twins' argument names."""
    extras = {"padding_mask": split.mask, "token_type_ids": split.token_types}
    return {k: v for k, v in extras.items() if v is not None}


def eval_dataset(split: Split, batch_size: int, input_kind: str):
    import tensorflow as tf

    if isinstance(split.x, Stream):
        return streamed(stream_keys(len(split), batch_size, 0, -1, 0), split.x, seed=0)
    if isinstance(split.x, ImageFiles) or split.masking is not None:
        keys = tf.data.Dataset.range(len(split)).batch(batch_size)
        return decoded(keys.map(lambda index: (tf.constant(-1, tf.int64), index)), split, seed=0)
    if split.has_text_inputs:
        data = ({"ids": split.x, **text_extras(split)}, split.y)
    else:
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

    if split.masking is not None:
        return masked(keys, split, seed)

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


def masked(keys, split: Split, seed: int):
    """Keys (epoch, index) -> masked-LM (inputs, labels), masked as the torch loader masks them."""
    import tensorflow as tf

    ids, masking = split.x, split.masking
    steps = ids.shape[1]

    def draw(epoch, index):
        return masking.apply(ids[index], index, seed, int(epoch))

    def mask(epoch, index):
        x, y = tf.numpy_function(draw, [epoch, index], [tf.int64, tf.int64], stateful=False)
        return tf.ensure_shape(x, [None, steps]), tf.ensure_shape(y, [None, steps])

    return keys.map(mask).prefetch(tf.data.AUTOTUNE)


def stream_keys(total: int, batch_size: int, epochs: int, start_epoch: int, skip: int, share=(0, 1)):
    """(epoch, positions) of every batch of a streamed split, the first ``skip`` left out: the
    positions in order (the stream's order is its own); ``share`` (rank, world) keeps a
    contiguous part of each batch, split as ``np.array_split`` (and the torch sampler) split it.
    ``start_epoch`` -1 (and ``epochs`` 0): one pass for evaluation."""
    import tensorflow as tf

    rank, world = (tf.constant(v, tf.int64) for v in share)
    batches = -(-total // batch_size)

    def positions(epoch, batch):
        start = batch * batch_size
        size = tf.minimum(tf.constant(batch_size, tf.int64), total - start)
        low = start + rank * (size // world) + tf.minimum(rank, size % world)
        high = low + size // world + tf.cast(rank < size % world, tf.int64)
        return epoch, tf.range(low, high, dtype=tf.int64)

    if start_epoch < 0:
        return tf.data.Dataset.range(batches).map(lambda batch: positions(tf.constant(-1, tf.int64), batch))
    epochs_range = tf.data.Dataset.range(start_epoch, epochs)
    keys = epochs_range.flat_map(lambda e: tf.data.Dataset.range(batches).map(lambda b: positions(e, b)))
    return keys.skip(skip) if skip else keys


def streamed(keys, stream: Stream, seed: int):
    """Keys (epoch, positions) -> the stream's batches, channels last, decoded in a parallel map
    that keeps the keys' order (each call reads with a cursor of its own)."""
    import tensorflow as tf

    outputs = stream.examples.outputs(channels_last=True)
    types = [tf.as_dtype(dtype) for _, dtype, _ in outputs]

    def read(epoch, index):
        arrays = stream.batch(index, seed, int(epoch), channels_last=True)
        return [a for a in arrays if a is not None]

    def decode(epoch, index):
        arrays = tf.numpy_function(read, [epoch, index], types, stateful=False)
        arrays = [
            tf.ensure_shape(a, [None, *shape]) for a, (_, _, shape) in zip(arrays, outputs, strict=True)
        ]
        *inputs, labels = arrays
        if stream.text_inputs:
            return {name: a for a, (name, _, _) in zip(inputs, outputs, strict=False)}, labels
        return inputs[0], labels

    if not stream.workers:  # one call at a time, in the order of the keys
        return keys.map(decode).prefetch(tf.data.AUTOTUNE)
    return keys.map(decode, num_parallel_calls=stream.workers, deterministic=True).prefetch(tf.data.AUTOTUNE)


def per_worker(strategy, split: Split, batches):
    """``batches(share)``: the training stream for a worker's (rank, world) share. A streamed
    split under a multi-worker strategy gives each worker its own share of every batch to read
    (``distribute_datasets_from_function``: no worker reads another's examples); anything else
    is one stream of whole batches that tf.distribute splits over the replicas."""
    workers = getattr(getattr(strategy, "extended", None), "_num_workers", 1)
    if not isinstance(split.x, Stream) or workers <= 1:
        return batches((0, 1))
    return strategy.distribute_datasets_from_function(
        lambda context: batches((context.input_pipeline_id, context.num_input_pipelines))
    )
