"""MultiWorkerMirroredStrategy that works with Keras 3.15's ``fit``.

On this stack ``fit`` under a multi-worker strategy fails twice (measured with two
local workers and TF_CONFIG): ``_maybe_symbolic_build`` reduces a tuple of per-replica input
batches with ``strategy.reduce`` (a collective strategy cannot, and only the shapes are
needed; MirroredStrategy can, but not when the batch it takes splits unevenly over the
replicas, as a language model's last batch does: the first fix is applied under it too),
and ``reduce_per_replica`` averages scalar metrics with ``axis=0``. zoo
replaces those two reductions, once, for the Keras version it pins; a test trains two
local workers and checks their weights against a single process.
"""

from __future__ import annotations

import keras
from keras.src import tree
from keras.src.backend.tensorflow import trainer as tf_trainer

PATCHED_FOR = "3.15"


def multi_worker_strategy():
    import tensorflow as tf

    patch_keras()
    return tf.distribute.MultiWorkerMirroredStrategy()


def patch_keras() -> None:
    import tensorflow as tf

    if getattr(tf_trainer, "_zoo_multi_worker", False):
        return
    if not keras.__version__.startswith(PATCHED_FOR):
        raise RuntimeError(
            f"zoo's multi-worker fix is for Keras {PATCHED_FOR}.x, this is {keras.__version__}; "
            "check whether Keras fixed fit under MultiWorkerMirroredStrategy and update "
            "zoo/keras/multi_worker.py"
        )

    def local(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return value.values[0]
        return value

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = tree.map_structure(local, next(it))  # shapes are all that is needed
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    original = tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("mean", "auto") and tf_trainer._collective_all_reduce_multi_worker(strategy):

            def mean(value):
                axis = 0 if len(getattr(value, "shape", ())) else None
                return strategy.reduce("MEAN", value, axis=axis)

            return tree.map_structure(mean, values)
        return original(values, strategy, reduction)

    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    tf_trainer.reduce_per_replica = reduce_per_replica
    tf_trainer._zoo_multi_worker = True
