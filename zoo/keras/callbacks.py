"""Keras callbacks that write zoo's run files."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import keras

from zoo import state
from zoo.runs import MetricsLog, NonFiniteLoss, NonFiniteWeights
from zoo.tracking import Tracker, open_tracker, step_scalars


class EpochMetrics(keras.callbacks.Callback):
    """One CSV row per epoch, in the columns the Lightning side writes too; the tracker
    (TensorBoard, MLflow) gets the same row."""

    def __init__(self, log: MetricsLog, tracker: Tracker | None = None):
        super().__init__()
        self.metrics_log = log
        self.tracker = tracker
        self.started = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        row = {f"train_{k}" if not k.startswith("val_") else k: float(v) for k, v in logs.items()}
        row.pop("train_learning_rate", None)
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        row["epoch"] = epoch + 1
        row["step"] = step
        row["lr"] = float(optimizer.learning_rate)  # the rate of the next update
        row["epoch_seconds"] = time.perf_counter() - self.started
        self.metrics_log.append(row)
        if self.tracker is not None:
            self.tracker.epoch(row)

    def on_train_end(self, logs=None):
        if self.tracker is not None:
            self.tracker.flush()


def training_optimizer(model):
    """The optimizer that counts micro-batches and accumulates: under 16-mixed, Keras wraps
    it in a LossScaleOptimizer whose own counters never move."""
    return getattr(model.optimizer, "inner_optimizer", model.optimizer)


class BatchCounter(keras.callbacks.Callback):
    """Counts batches in Python from where the optimizer stood when ``fit`` began: reading
    the optimizer's counter every batch is a runtime call that a small model's step notices."""

    def __init__(self):
        super().__init__()
        self.micro = 0  # batches, not optimizer steps: they differ under accumulation

    def on_train_begin(self, logs=None):
        self.micro = int(training_optimizer(self.model)._iterations.numpy())

    def count_batch(self) -> tuple[int, bool]:
        """Optimizer steps done after this batch, and whether this batch ended one."""
        self.micro += 1
        steps, rest = divmod(self.micro, training_optimizer(self.model).gradient_accumulation_steps or 1)
        return steps, rest == 0


class StopOnNonFiniteLoss(BatchCounter):
    """Stop at the first non-finite training loss (Keras logs the epoch's running mean,
    which turns non-finite with the first bad batch), saying where and what came before."""

    def __init__(self):
        super().__init__()
        self.last_finite: tuple[int, float] | None = None
        self.mean = 0.0  # the epoch's running mean after the previous batch

    def on_train_batch_end(self, batch, logs=None):
        step, _ = self.count_batch()
        mean = float((logs or {}).get("loss", 0.0))
        if not math.isfinite(mean):
            raise NonFiniteLoss(mean, step, self.last_finite)
        # This batch's own loss, as Lightning reports it, out of the mean over ``batch + 1``.
        loss = mean * (batch + 1) - self.mean * batch
        self.mean = mean
        self.last_finite = (step, loss)


def save_state(model, path: Path, keep: int, position: dict) -> None:
    """Every model variable (weights, BatchNorm statistics, dropout seed-generator states)
    and every optimizer variable, by index, plus the loop position, as one safetensors."""
    import numpy as np
    from safetensors.numpy import save_file

    tensors = {f"model/{i}": np.asarray(v.numpy()) for i, v in enumerate(model.variables)}
    # A state with NaN weights would replace the last good one and resume into nothing.
    bad = [v.path for v in model.trainable_variables if not np.isfinite(v.numpy()).all()]
    if bad:
        raise NonFiniteWeights(position["step"], bad)
    tensors |= {f"optimizer/{i}": np.asarray(v.numpy()) for i, v in enumerate(model.optimizer.variables)}
    tensors = {k: np.require(v, requirements="C") for k, v in tensors.items()}
    temporary = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(temporary), metadata={"position": json.dumps(position), "framework": "keras"})
    state.commit(temporary, path, keep)


def load_state(model, path: Path) -> dict:
    """Restore what :func:`save_state` wrote into a compiled model with a built optimizer."""
    from safetensors import safe_open

    from zoo.checkpoint import CheckpointError

    with safe_open(str(path), framework="np") as handle:
        position = json.loads(handle.metadata()["position"])
        for prefix, variables in (("model", model.variables), ("optimizer", model.optimizer.variables)):
            names = [k for k in handle.keys() if k.startswith(prefix + "/")]  # noqa: SIM118
            if len(names) != len(variables):
                raise CheckpointError(
                    f"{path}: {len(names)} {prefix} variables saved, the model has {len(variables)}; "
                    "the state is from another recipe or was changed"
                )
            for i, variable in enumerate(variables):
                saved = handle.get_tensor(f"{prefix}/{i}")
                if tuple(saved.shape) != tuple(variable.shape):
                    raise CheckpointError(
                        f"{path}: {prefix} variable {variable.path} was saved with shape "
                        f"{list(saved.shape)}, the model has {list(variable.shape)}; the state is "
                        "from another recipe or was changed"
                    )
                variable.assign(saved)
    return position


class SaveState(BatchCounter):
    """The full training state every N optimizer steps and at every epoch end."""

    def __init__(self, run_dir: Path, batches_per_epoch: int, every_n_steps: int | None, keep: int):
        super().__init__()
        self.run_dir, self.batches = Path(run_dir), batches_per_epoch
        self.every_n_steps, self.keep = every_n_steps, keep
        self.saved = -1

    def save(self) -> None:
        optimizer = training_optimizer(self.model)
        batches_done = int(optimizer._iterations.numpy())  # micro-batches, accumulation included
        if batches_done == self.saved:
            return
        epoch, index = divmod(batches_done, self.batches)
        step = int(optimizer.iterations.numpy())
        position = {"batches_done": batches_done, "epoch": epoch, "batch": index, "step": step}
        save_state(self.model, state.state_path(self.run_dir, step, "safetensors"), self.keep, position)
        self.saved = batches_done

    def on_train_batch_end(self, batch, logs=None):
        if not self.every_n_steps:
            return
        steps, at_step_end = self.count_batch()
        if at_step_end and steps % self.every_n_steps == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        self.save()


class TensorBoardWriter:
    """``tf.summary`` on ``run/tb`` with zoo's tags: Keras' own TensorBoard callback names the
    same quantities ``epoch_loss`` under ``train/`` and ``validation/`` folders, which would
    not sit on the Lightning run's cards."""

    def __init__(self, folder: Path):
        import tensorflow as tf

        self.writer = tf.summary.create_file_writer(str(folder))

    def write(self, scalars: dict[str, float], step: int) -> None:
        import tensorflow as tf

        with self.writer.as_default(step=step):
            for tag, value in scalars.items():
                tf.summary.scalar(tag, value)

    def flush(self) -> None:
        self.writer.flush()


class StepScalars(BatchCounter):
    """Loss, learning rate, gradient norm and samples/s every ``tracking.log_every_n_steps``
    optimizer steps, with the tags the Lightning side writes."""

    def __init__(self, tracker: Tracker, batch_size: int, samples_per_epoch: int):
        super().__init__()
        self.tracker, self.batch_size, self.samples = tracker, batch_size, samples_per_epoch
        self.mean, self.weight = 0.0, 0  # the epoch's running loss mean, and the samples it is over
        self.losses: list[float] = []
        self.window_started, self.window_samples = time.perf_counter(), 0

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self.window_started, self.window_samples = time.perf_counter(), 0

    def on_epoch_begin(self, epoch, logs=None):
        self.mean, self.weight = 0.0, 0

    def on_train_batch_end(self, batch, logs=None):
        steps, at_step_end = self.count_batch()
        # Keras logs the epoch's running mean weighted by batch size; the last batch of an
        # epoch is the short one. This batch's own loss comes out of two consecutive means.
        last = batch + 1 == self.params.get("steps")
        size = self.samples - (math.ceil(self.samples / self.batch_size) - 1) * self.batch_size
        size = size if last else self.batch_size
        mean = float((logs or {}).get("loss", 0.0))
        weight = self.weight + size
        self.losses.append((mean * weight - self.mean * self.weight) / size)
        self.mean, self.weight = mean, weight
        self.window_samples += size
        if not at_step_end:  # Keras carries an unfinished accumulation into the next epoch
            return
        losses, self.losses = self.losses, []
        if not self.tracker.wants_step(steps):
            return
        now = time.perf_counter()
        optimizer = training_optimizer(self.model)
        lr = float(optimizer.learning_rate)  # the rate of the next update, as the CSV's
        rate = self.window_samples / (now - self.window_started)
        # zoo's optimizers keep it (Float32State, grad_norm_every); built with the optimizer.
        kept = getattr(optimizer, "grad_norm", None)
        norm = None if kept is None else float(kept.numpy())
        self.tracker.step(steps, step_scalars(sum(losses) / len(losses), lr, norm, rate))
        self.window_started, self.window_samples = now, 0


def tracking_callbacks(recipe, run_dir: Path, metrics_log: MetricsLog, samples_per_epoch: int) -> list:
    """The callbacks that write a run's curves: the CSV, and TensorBoard / MLflow as the
    recipe's ``tracking`` section asks (zoo.tracking opens them before the first step)."""
    tracker = open_tracker(recipe, run_dir, samples_per_epoch, TensorBoardWriter)
    callbacks: list = [EpochMetrics(metrics_log, tracker)]
    if tracker is not None and tracker.writer is not None:
        callbacks.append(StepScalars(tracker, recipe.data.batch_size, samples_per_epoch))
    return callbacks
