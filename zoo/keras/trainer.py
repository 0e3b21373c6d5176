"""Train a Keras twin with ``compile``/``fit``, as a recipe says.

The step itself (the compiled model, its optimizer, the seeded stream) comes from the step
kit, zoo.keras.steps; this module adds the loop around it: devices, threads and the
distribution strategy, the callbacks (metrics, tracking, training states), ``fit`` from a
resume position, and the test.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zoo.backend import StepPlan
from zoo.data import steps_per_epoch
from zoo.early_stopping import EarlyStopping, check_validation
from zoo.hardware import SetupError, check_trainer, kernel_threads, resolve_accelerator
from zoo.initial_weights import initial_tensors
from zoo.keras.data import eval_dataset, per_worker
from zoo.keras.steps import KerasSteps, train_stream
from zoo.metrics_file import MetricsLog
from zoo.progress import EpochLines, bar_on_stderr, training_progress
from zoo.runs import signals
from zoo.runs.export import best_exporter
from zoo.schedule import epoch_spans, lr_table, optimizer_steps, run_length

if TYPE_CHECKING:
    from zoo.plan import RunPlan


def configure(trainer_cfg, recorded_threads: int | None = None) -> int:
    """Devices, threads and determinism: TensorFlow takes these only before its runtime starts.

    GPUs get memory growth (TensorFlow would otherwise take all their memory) and devices
    the recipe did not ask for are hidden. On the CPU, a multi-device recipe splits the
    CPU into logical devices, so ``mirrored`` runs (and is tested) without a GPU. The kernel
    threads are zoo.hardware.kernel_threads' (``recorded_threads``: a resumed state's); returns them.
    """
    import tensorflow as tf

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


def compiled_for_training(
    recipe, family, dataset, model, table, init=None, *, accumulate=None, jit_compile=None
) -> tuple[Any, Any]:
    """:meth:`zoo.keras.steps.KerasSteps.compiled` spelled with a recipe's parts: the model that
    takes the batches and its optimizer."""
    plan = StepPlan(recipe, family, model.zoo_config, dataset, init)
    steps = KerasSteps.compiled(plan, model, table, accumulate=accumulate, jit_compile=jit_compile)
    return steps.model, steps.optimizer


@dataclass(frozen=True)
class Loop:
    """What runs the epochs around the compiled step: the stream's strategy, the validation
    data, the callbacks and how progress shows."""

    plan: RunPlan
    model: Any  # compiled (zoo.keras.steps.KerasSteps.model)
    strategy: Any  # a tf.distribute strategy, or None on one device
    val: Any
    progress: str
    callbacks: list[Any]
    early: EarlyStopping | None = None  # trainer.early_stopping's decision

    def train(self, first_epoch: int, last_epoch: int, skip: int, steps: int) -> None:
        """Keras' ``fit`` over epochs ``first_epoch`` to ``last_epoch``, ``skip`` batches into the first."""
        from zoo.keras.callbacks import SaveState

        def batches(share: tuple[int, int]):
            return train_stream(self.plan.steps, last_epoch, start_epoch=first_epoch, skip=skip, share=share)

        stream = per_worker(self.strategy, self.plan.dataset.train, batches)
        try:
            self.model.fit(
                stream,
                initial_epoch=first_epoch,
                epochs=last_epoch,
                steps_per_epoch=steps,
                validation_data=self.val,
                callbacks=self.callbacks,
                shuffle=False,  # the order is zoo's, already in the dataset
                verbose=1 if self.progress == "bar" else 0,
            )
        except Exception as error:  # a batch the data could not give: the steps before it are saved
            for callback in self.callbacks:
                if isinstance(callback, SaveState):
                    callback.stopped_by(error)
            raise


def fit(plan: RunPlan) -> tuple[Any, dict[str, float]]:
    """Train, validate every epoch, test; return the trained twin and the test metrics.

    ``plan.resume`` is a state file of this run: training continues at its batch, in two
    ``fit`` calls when it stopped mid-epoch (the rest of that epoch, then the others).
    """
    trainer_cfg, resume = plan.recipe.trainer, plan.resume
    check_trainer(trainer_cfg)
    import keras

    from zoo.keras.callbacks import StopOnNonFiniteLoss, saved_threads

    threads = configure(trainer_cfg, saved_threads(resume) if resume is not None else None)
    keras.utils.set_random_seed(trainer_cfg.seed)
    batches = steps_per_epoch(len(plan.dataset.train), plan.recipe.data.batch_size)
    updates = optimizer_steps(batches, trainer_cfg.accumulate_grad_batches)
    epochs, total = run_length(trainer_cfg, updates)
    table = lr_table(plan.recipe.schedule, plan.recipe.optimizer.lr, updates, epochs, total)
    strategy = distribution_strategy(trainer_cfg)
    early = EarlyStopping.from_recipe(trainer_cfg.early_stopping)
    check_validation(early, len(plan.dataset.val))
    twin, model, position = build_start(plan, strategy, table)
    eval_batch, kind = plan.recipe.data.eval_batch_size, plan.family.input_kind
    val = eval_dataset(plan.dataset.val, eval_batch, kind) if len(plan.dataset.val) else None
    losses = StopOnNonFiniteLoss(first=position.get("first_batch_loss"))  # states before it have none
    progress = training_progress(trainer_cfg.progress_bar) if plan.run else "none"
    callbacks = [losses, *stop_early(plan, early, twin, position)]
    callbacks += run_callbacks(plan, progress, batches, losses, threads, epochs, early)
    loop = Loop(plan, model, strategy, val, progress, callbacks, early)
    seconds = train_epochs(loop, position, batches, total * trainer_cfg.accumulate_grad_batches)
    test = model.evaluate(eval_dataset(plan.dataset.test, eval_batch, kind), verbose=0, return_dict=True)
    replicas = strategy.num_replicas_in_sync if strategy else 1
    metrics = {f"test_{k}": float(v) for k, v in test.items()} | (early.outcome() if early else {})
    first = losses.first  # zoo.runs.growth compares the last epoch's loss with it
    return twin, {
        **metrics, "train_seconds": seconds, "replicas": replicas, "num_threads": threads,
        **({"train_loss_first_batch": first} if first is not None else {}),
    }  # fmt: skip


def build_start(plan: RunPlan, strategy, table) -> tuple[Any, Any, dict[str, Any]]:
    """The twin of the plan's seed in the recipe's precision, compiled by the step kit under the
    strategy's scope, its optimizer's slots built, and a resume state's weights, slots and loop
    position loaded. Returns the twin, the model that takes the batches and that position
    (``epoch``, ``batch``...; empty for a fresh run)."""
    from zoo.keras.callbacks import load_state
    from zoo.nn.keras.precision import build_keras

    trainer_cfg = plan.recipe.trainer
    initial = initial_tensors(plan.family, plan.config, trainer_cfg.seed)
    with strategy.scope() if strategy else contextlib.nullcontext():
        twin = build_keras(plan.family, plan.config, trainer_cfg.precision, initial)
        plan.family.set_grad_checkpointing(twin, "keras", trainer_cfg.gradient_checkpointing)
        model = KerasSteps.compiled(plan.steps, twin, table).model
        # Built here, eagerly: Keras builds it inside the first traced step, where TensorFlow wraps
        # each slot's initialiser in a conditional and then traces the whole step a second time
        # without them (vit-micro: 3.4 s of slots and a 7 s second trace, in a 13 s run).
        # (zoo compare builds its own where it updates: a forward check needs no slots.)
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        position = load_state(model, plan.resume) if plan.resume is not None else {}
    return twin, model, position


def stop_early(plan: RunPlan, early: EarlyStopping | None, twin, position: dict[str, Any]) -> list[Any]:
    """trainer.early_stopping's callback, its decision continued from a resume state's."""
    if early is None:
        return []
    from zoo.keras.early_stopping import StopEarly

    early.restore(position.get("early_stopping"))
    return [StopEarly(early, twin, best_exporter(plan))]


def run_callbacks(
    plan: RunPlan, progress: str, batches: int, losses, threads: int, epochs: int, early=None
) -> list[Any]:
    """A run folder's callbacks: the metrics CSV, TensorBoard and MLflow, and training states."""
    from zoo.keras.callbacks import SaveState, tracking_callbacks

    run, recipe = plan.run, plan.recipe
    if not run:
        return []
    lines = EpochLines(epochs) if progress == "lines" else None
    log = MetricsLog(
        run.metrics, plan.dataset.task, append=plan.resume is not None, echo=lines,
        tokenizer=plan.dataset.tokenizer, extra=recipe.trainer.metrics,
    )  # fmt: skip
    callbacks = tracking_callbacks(recipe, run.path, log, len(plan.dataset.train))  # CSV, TensorBoard, MLflow
    export = recipe.export
    return [
        *callbacks,
        SaveState(run.path, batches, export.state_every_n_steps, export.keep_states, losses, threads, early),
    ]


def train_epochs(loop: Loop, position: dict[str, Any], batches: int, total: int) -> float:
    """The batches left up to the run's ``total``, from ``position`` (a resume state's): the rest of
    the epoch it stopped in, the other epochs, and the part of one where ``trainer.max_steps`` ends
    the run (zoo.schedule.epoch_spans). Returns the seconds they took."""
    spans = epoch_spans(position.get("epoch", 0), position.get("batch", 0), batches, total)
    started = time.perf_counter()
    # SaveState stops fit on SIGTERM at a step end, saved; without it (no run folder) it stops at once.
    with bar_on_stderr(loop.progress), signals.loop_stops() if loop.plan.run else contextlib.nullcontext():
        for first, end, skip, steps in spans:
            if loop.early is not None and loop.early.stopped:  # trainer.early_stopping ended the run
                break
            loop.train(first, end, skip, steps)
    return time.perf_counter() - started
