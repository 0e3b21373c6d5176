"""Train a Keras twin with ``compile``/``fit``, as a recipe says."""

from __future__ import annotations

import time

from zoo.data import Dataset, steps_per_epoch
from zoo.runs import MetricsLog, RunDir
from zoo.schedule import lr_table


def configure(trainer_cfg) -> None:
    """Process-wide TensorFlow settings; must run before TensorFlow creates any tensor."""
    import tensorflow as tf

    if trainer_cfg.num_threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(trainer_cfg.num_threads)
            tf.config.threading.set_inter_op_parallelism_threads(trainer_cfg.num_threads)
        except RuntimeError:
            pass  # TensorFlow is already initialised in this process; its threads stay
    if trainer_cfg.deterministic:
        tf.config.experimental.enable_op_determinism()


def compile_for(model, task: str, optimizer) -> None:
    """Loss and metrics per task, the same quantities the Lightning tasks log."""
    import keras

    from zoo.keras.metrics import BitsPerCharacter

    metric = (
        BitsPerCharacter(name="bpc")
        if task == "language_modeling"
        else keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[metric],
        jit_compile=False,
    )


def fit(recipe, config, family, dataset: Dataset, run: RunDir):
    """Train, validate every epoch, test; return the trained twin and the test metrics."""
    import keras

    from zoo.keras.callbacks import EpochMetrics
    from zoo.keras.data import eval_dataset, train_dataset
    from zoo.keras.optimizers import build_optimizer

    trainer_cfg, data_cfg = recipe.trainer, recipe.data
    configure(trainer_cfg)
    keras.utils.set_random_seed(trainer_cfg.seed)
    model = family.build_keras(config)
    steps = steps_per_epoch(len(dataset.train), data_cfg.batch_size)
    table = lr_table(recipe.schedule, recipe.optimizer.lr, steps, trainer_cfg.max_epochs)
    compile_for(model, dataset.task, build_optimizer(recipe.optimizer, table))
    kind = family.input_kind
    train = train_dataset(
        dataset.train,
        data_cfg.batch_size,
        trainer_cfg.seed,
        data_cfg.shuffle,
        trainer_cfg.max_epochs,
        kind,
    )
    val = eval_dataset(dataset.val, data_cfg.eval_batch_size, kind) if len(dataset.val) else None
    started = time.perf_counter()
    model.fit(
        train,
        epochs=trainer_cfg.max_epochs,
        steps_per_epoch=steps,
        validation_data=val,
        callbacks=[EpochMetrics(MetricsLog(run.metrics, dataset.task), steps)],
        shuffle=False,  # the order is zoo's, already in the dataset
        verbose="auto" if trainer_cfg.progress_bar else 0,
    )
    seconds = time.perf_counter() - started
    test = model.evaluate(
        eval_dataset(dataset.test, data_cfg.eval_batch_size, kind), verbose=0, return_dict=True
    )
    return model, {**{f"test_{k}": float(v) for k, v in test.items()}, "train_seconds": seconds}
