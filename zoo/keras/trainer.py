"""Train a Keras twin with ``compile``/``fit``, as a recipe says."""

from __future__ import annotations

import contextlib
import time

from zoo.data import Dataset, steps_per_epoch
from zoo.hardware import SetupError, check_trainer, resolve_accelerator
from zoo.progress import EpochLines, bar_on_stderr, training_progress
from zoo.recipe.capabilities import PRECISIONS
from zoo.runs import MetricsLog, RunDir, signals
from zoo.schedule import lr_table, optimizer_steps


def configure(trainer_cfg, recorded_threads: int | None = None) -> int:
    """Devices, threads and determinism: TensorFlow takes these only before its runtime starts.

    GPUs get memory growth (TensorFlow would otherwise take all their memory) and devices
    the recipe did not ask for are hidden. On the CPU, a multi-device recipe splits the
    CPU into logical devices, so ``mirrored`` runs (and is tested) without a GPU. The kernel
    threads are zoo.hardware.kernel_threads' (``recorded_threads``: a resumed state's); returns them.
    """
    import tensorflow as tf

    from zoo.hardware import kernel_threads

    threads = kernel_threads(trainer_cfg, recorded_threads)

    accelerator = resolve_accelerator(trainer_cfg.accelerator)
    gpus = tf.config.list_physical_devices("GPU")
    if accelerator == "gpu" and len(gpus) < trainer_cfg.devices:
        raise SetupError(
            f"trainer.accelerator is 'gpu' with {trainer_cfg.devices} device(s), but TensorFlow "
            f"sees {len(gpus)} GPU(s) here; use 'cpu' or 'auto'"
        )
    try:
        if accelerator == "gpu":
            for gpu in gpus:
                tf.config.experimental.set_memory_growth(gpu, True)
            tf.config.set_visible_devices(gpus[: trainer_cfg.devices], "GPU")
        else:
            tf.config.set_visible_devices([], "GPU")
            if trainer_cfg.devices > 1:
                cpu = tf.config.list_physical_devices("CPU")[0]
                logical = [tf.config.LogicalDeviceConfiguration()] * trainer_cfg.devices
                tf.config.set_logical_device_configuration(cpu, logical)
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        # The runtime already started in this process (an earlier model): its settings stay.
        # That is only a problem if it lacks the devices this recipe needs.
        kind = "GPU" if accelerator == "gpu" else "CPU"
        if len(tf.config.list_logical_devices(kind)) < trainer_cfg.devices:
            raise SetupError(
                f"TensorFlow already started in this process with fewer {kind} devices than "
                f"trainer.devices={trainer_cfg.devices}; run the recipe in a fresh process (zoo train)"
            ) from None
    if trainer_cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    return threads


def distribution_strategy(trainer_cfg):
    """The tf.distribute strategy for the recipe, or None for a single device."""
    import tensorflow as tf

    strategy = trainer_cfg.resolved_strategy()
    if strategy == "mirrored":
        kind = "GPU" if resolve_accelerator(trainer_cfg.accelerator) == "gpu" else "CPU"
        devices = [d.name for d in tf.config.list_logical_devices(kind)][: trainer_cfg.devices]
        from zoo.keras.multi_worker import patch_keras

        patch_keras()  # its symbolic build also fails on a first batch split unevenly over replicas
        return tf.distribute.MirroredStrategy(devices)
    if strategy == "multi_worker_mirrored":
        from zoo.keras.multi_worker import multi_worker_strategy

        return multi_worker_strategy()
    return None


def compile_for(model, task: str, optimizer, jit_compile: bool = False, metric: str | None = None) -> None:
    """Loss and metrics per task, the same quantities the Lightning tasks log, under the same
    names (``metric``: the data's, :attr:`zoo.data.Dataset.metrics`). Token tasks skip
    ``IGNORE_INDEX`` labels (padding, unmasked positions)."""
    import keras

    from zoo.keras.losses import TokenAccuracy, TokenBits, TokenCrossEntropy

    if task == "classification":
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        measure = keras.metrics.SparseCategoricalAccuracy(name=metric or "accuracy")
    elif task == "language_modeling":
        loss, measure = TokenCrossEntropy(), TokenBits(name=metric or "bpc")
    else:  # token_classification, masked_language_modeling
        loss, measure = TokenCrossEntropy(), TokenAccuracy(name=metric or "accuracy")
    model.compile(optimizer=optimizer, loss=loss, metrics=[measure], jit_compile=jit_compile)


def for_batches(model, dataset: Dataset):
    """The model ``fit`` and ``evaluate`` call: the twin, or for padded text the twin behind
    :class:`~zoo.keras.losses.TextInputs` (the batches are dicts of ids, mask, token types)."""
    import inspect

    from zoo.data import DataError
    from zoo.keras.losses import TextInputs

    split = dataset.train if len(dataset.train) else dataset.test
    if not split.has_text_inputs:
        return model
    pairs = split.token_types is not None or getattr(split.x, "pairs", False)
    if pairs and "token_type_ids" not in inspect.signature(model.call).parameters:
        raise DataError(
            f"{type(model).__name__} takes no token_type_ids; sentence pairs need a family whose "
            "twin takes token types"
        )
    return TextInputs(model)


def initialise(model, family, init) -> dict[str, float]:
    """Load a fine-tuning start into ``model``, freeze the backbone if asked; return the
    learning-rate multipliers of the head's variables (by variable path)."""
    from zoo.checkpoint.tables import keras_layer
    from zoo.checkpoint.tensors import load_tensors, model_tensors
    from zoo.finetune import merged_tensors

    if init is None:
        return {}
    load_tensors(model, merged_tensors(init, model_tensors(model)))
    multipliers = {}
    for port in family.weight_table(model.zoo_config):
        layer = keras_layer(model, port.layer)
        in_head = any(spec.name in init.head for spec in port.tensors)
        if not in_head and init.freeze_backbone:
            layer.trainable = False  # a frozen BatchNorm also normalises with its running statistics
        for name in port.variables:
            variable = keras_layer(layer, name)
            if in_head and init.head_lr:
                multipliers[variable.path] = init.head_lr
    return multipliers


def exempt_paths(model, family) -> set[str]:
    """Paths of the Keras variables weight decay leaves alone
    (zoo.checkpoint.tables.decay_exempt_variables)."""
    from zoo.checkpoint.tables import decay_exempt_variables, keras_layer

    table = family.weight_table(model.zoo_config)
    exempt = decay_exempt_variables(table)
    return {keras_layer(keras_layer(model, layer), name).path for layer, name in exempt}


def compiled_for_training(
    recipe, family, dataset: Dataset, model, table, init=None, *, accumulate=None, jit_compile=None
):
    """The model ``fit`` trains, compiled as ``fit`` compiles it: the fine-tuning start, the
    optimizer (head rates, decay exemptions, clipping, accumulation) and the task's loss and
    metric. Returns the model that takes the batches (the twin, or the twin behind
    :class:`~zoo.keras.losses.TextInputs`) and the optimizer. ``zoo compare`` steps the same
    model with ``train_on_batch`` (``accumulate=1``, ``jit_compile=False``)."""
    from zoo.keras.optimizers import build_optimizer

    trainer_cfg = recipe.trainer
    head_rates = initialise(model, family, init)
    if recipe.init.lora is not None:  # adapters on the frozen base: they (and biases asked for) train
        from zoo.lora import attach

        attach(model, family, model.zoo_config, recipe.init.lora, trainer_cfg.seed)
    multipliers = {path: rate / recipe.optimizer.lr for path, rate in head_rates.items()}
    optimizer = build_optimizer(
        recipe.optimizer,
        table,
        accumulate=trainer_cfg.accumulate_grad_batches if accumulate is None else accumulate,
        lr_multipliers=multipliers,
        decay_exempt=None if recipe.optimizer.decay_biases_and_norms else exempt_paths(model, family),
        clip_norm=trainer_cfg.gradient_clip_norm,
        # On every worker alike (see Float32State); the TensorBoard step scalars read it.
        grad_norm_every=recipe.tracking.log_every_n_steps if recipe.tracking.tensorboard else None,
    )
    model = for_batches(model, dataset)
    jit_compile = trainer_cfg.compile if jit_compile is None else jit_compile
    compile_for(
        model, dataset.task, loss_scaled(optimizer, trainer_cfg.precision), jit_compile, dataset.metrics[0]
    )
    return model, optimizer


def loss_scaled(optimizer, precision: str):
    """``optimizer`` behind Keras' LossScaleOptimizer where the precision needs loss scaling,
    as Lightning's 16-mixed puts a GradScaler in. Keras' ``compile`` adds one only to a model
    whose own policy is ``mixed_float16``, and a zoo twin is built under float32 with only
    its product layers mixed (``zoo.nn.keras.precision``): without this, 16-mixed trained
    unscaled. The optimizer zoo counts steps with and saves is the inner one
    (``zoo.keras.callbacks.training_optimizer``)."""
    import keras

    if not PRECISIONS[precision].loss_scaling:
        return optimizer
    return keras.optimizers.LossScaleOptimizer(optimizer)


def fit(recipe, config, family, dataset: Dataset, run: RunDir | None, init=None, resume=None):
    """Train, validate every epoch, test; return the trained twin and the test metrics.

    ``resume`` is a state file of this run: training continues at its batch, in two
    ``fit`` calls when it stopped mid-epoch (the rest of that epoch, then the others).
    """
    check_trainer(recipe.trainer)
    import keras

    from zoo.initial_weights import initial_tensors
    from zoo.keras.callbacks import (
        SaveState,
        StopOnNonFiniteLoss,
        load_state,
        saved_threads,
        tracking_callbacks,
    )
    from zoo.keras.data import eval_dataset, per_worker, train_dataset
    from zoo.nn.keras.precision import build_keras

    trainer_cfg, data_cfg = recipe.trainer, recipe.data
    threads = configure(trainer_cfg, saved_threads(resume) if resume is not None else None)
    keras.utils.set_random_seed(trainer_cfg.seed)
    batches = steps_per_epoch(len(dataset.train), data_cfg.batch_size)
    accumulate = trainer_cfg.accumulate_grad_batches
    steps = optimizer_steps(batches, accumulate)
    table = lr_table(recipe.schedule, recipe.optimizer.lr, steps, trainer_cfg.max_epochs)
    strategy = distribution_strategy(trainer_cfg)
    initial = initial_tensors(family, config, trainer_cfg.seed)
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = build_keras(family, config, trainer_cfg.precision, initial)
        family.set_grad_checkpointing(model, "keras", trainer_cfg.gradient_checkpointing)
        twin = model
        model, _ = compiled_for_training(recipe, family, dataset, model, table, init)
        # Built here, eagerly: Keras builds it inside the first traced step, where TensorFlow wraps
        # each slot's initialiser in a conditional and then traces the whole step a second time
        # without them (vit-micro: 3.4 s of slots and a 7 s second trace, in a 13 s run).
        # (zoo compare builds its own where it updates: a forward check needs no slots.)
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        epoch, skip, position = 0, 0, {}
        if resume is not None:
            position = load_state(model, resume)
            epoch, skip = position["epoch"], position["batch"]
    kind = family.input_kind
    val = eval_dataset(dataset.val, data_cfg.eval_batch_size, kind) if len(dataset.val) else None
    losses = StopOnNonFiniteLoss(first=position.get("first_batch_loss"))  # states before it have none
    callbacks = [losses]
    progress = training_progress(trainer_cfg.progress_bar) if run else "none"
    if run:
        lines = EpochLines(trainer_cfg.max_epochs) if progress == "lines" else None
        log = MetricsLog(
            run.metrics, dataset.task, append=resume is not None, echo=lines, tokenizer=dataset.tokenizer
        )
        callbacks += tracking_callbacks(recipe, run.path, log, len(dataset.train))  # CSV, TensorBoard, MLflow
    run_path = run.path if run else None
    if run_path is not None:
        callbacks.append(
            SaveState(
                run_path,
                batches,
                recipe.export.state_every_n_steps,
                recipe.export.keep_states,
                losses,
                threads,
            )
        )

    def train(first_epoch: int, last_epoch: int, skip: int, steps: int) -> None:
        def batches(share: tuple[int, int]):
            return train_dataset(
                dataset.train, data_cfg.batch_size, trainer_cfg.seed, data_cfg.shuffle, last_epoch, kind,
                start_epoch=first_epoch, skip=skip, share=share,
            )  # fmt: skip

        stream = per_worker(strategy, dataset.train, batches)
        try:
            model.fit(
                stream,
                initial_epoch=first_epoch,
                epochs=last_epoch,
                steps_per_epoch=steps,
                validation_data=val,
                callbacks=callbacks,
                shuffle=False,  # the order is zoo's, already in the dataset
                verbose=1 if progress == "bar" else 0,
            )
        except Exception as error:  # a batch the data could not give: the steps before it are saved
            for callback in callbacks:
                if isinstance(callback, SaveState):
                    callback.stopped_by(error)
            raise

    started = time.perf_counter()
    # SaveState stops fit on SIGTERM at a step end, saved; without it (no run folder) it stops at once.
    with bar_on_stderr(progress), signals.loop_stops() if run_path else contextlib.nullcontext():
        if skip:  # the rest of the epoch the state stopped in
            train(epoch, epoch + 1, skip, batches - skip)
            epoch += 1
        if epoch < trainer_cfg.max_epochs:
            train(epoch, trainer_cfg.max_epochs, 0, batches)
    seconds = time.perf_counter() - started
    test = model.evaluate(
        eval_dataset(dataset.test, data_cfg.eval_batch_size, kind), verbose=0, return_dict=True
    )
    replicas = strategy.num_replicas_in_sync if strategy else 1
    metrics = {f"test_{k}": float(v) for k, v in test.items()}
    first = losses.first  # zoo.runs.growth compares the last epoch's loss with it
    return twin, {
        **metrics, "train_seconds": seconds, "replicas": replicas, "num_threads": threads,
        **({"train_loss_first_batch": first} if first is not None else {}),
    }  # fmt: skip
