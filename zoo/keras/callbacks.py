"""Keras callbacks that write zoo's run files."""

from __future__ import annotations

import json
import math
import time
import weakref
from pathlib import Path

import keras
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from zoo.checkpoint import state
from zoo.checkpoint.file import CheckpointError
from zoo.data.stream import unreadable_batch
from zoo.metrics_file import MetricsLog
from zoo.runs import NonFiniteLoss, NonFiniteWeights, check_run_folder, signals
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
        check_run_folder(self.metrics_log.path.parent)  # never a headerless metrics.csv in a recreated folder
        logs = logs or {}
        row = {f"train_{k}" if not k.startswith("val_") else k: float(v) for k, v in logs.items()}
        row.pop("train_learning_rate", None)
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        row["epoch"] = epoch + 1
        row["step"] = step
        row["lr"] = float(optimizer.learning_rate)  # the rate of the next update
        row["epoch_seconds"] = resumed_seconds(self.model, epoch) + time.perf_counter() - self.started
        self.metrics_log.append(row)
        if self.tracker is not None:
            self.tracker.epoch(row)

    def on_train_end(self, logs=None):
        if self.tracker is not None:
            self.tracker.flush()


# The epoch a mid-epoch resume continues, per model: SaveState puts back its metric sums and
# EpochMetrics adds the seconds spent on it before the interruption (two callbacks, one state).
_RESUMED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def resumed_seconds(model, epoch: int) -> float:
    resumed = _RESUMED.get(model)
    return float(resumed["seconds"]) if resumed and resumed["epoch"] == epoch else 0.0


def across_workers(model) -> bool:
    """Whether ``model`` trains under a multi-worker strategy, where reading a metric's sums is
    a cross-worker reduction: a callback that only the chief runs must not read them (the other
    workers' next collective would meet it and abort)."""
    strategy = getattr(model, "distribute_strategy", None)
    extended = getattr(strategy, "extended", None)
    return bool(getattr(extended, "_num_workers", 1) > 1)


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

    def loss_sums(self) -> tuple[float, float]:
        """The epoch's running loss mean and the samples it is over, as Keras' loss tracker
        holds them: zero at an epoch's start, the batches before the interruption after a
        mid-epoch resume (SaveState puts them back)."""
        if across_workers(self.model):
            return 0.0, 0.0  # reading them is a collective the other workers would not join
        tracker = self.model._loss_tracker
        count = float(tracker.count.numpy())
        return (float(tracker.total.numpy()) / count if count else 0.0), count

    def count_batch(self) -> tuple[int, bool]:
        """Optimizer steps done after this batch, and whether this batch ended one."""
        self.micro += 1
        steps, rest = divmod(self.micro, training_optimizer(self.model).gradient_accumulation_steps or 1)
        return steps, rest == 0


class StopOnNonFiniteLoss(BatchCounter):
    """Stop at the first non-finite training loss (Keras logs the epoch's running mean,
    which turns non-finite with the first bad batch), saying where and what came before. Keeps
    the run's first batch loss (``first``, carried by the training states), which
    zoo.runs.growth compares the last epoch's loss with."""

    def __init__(self, first: float | None = None):
        super().__init__()
        self.first = first
        self.last_finite: tuple[int, float] | None = None
        self.mean = 0.0  # the epoch's running mean after the previous batch
        self.before = 0.0  # batches of the epoch done before a mid-epoch resume
        self.count = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:  # once an epoch: a resumed epoch's mean starts from the batches before
            self.mean, self.count = self.loss_sums()

    def on_train_batch_end(self, batch, logs=None):
        step, _ = self.count_batch()
        mean = float((logs or {}).get("loss", 0.0))
        if not math.isfinite(mean):
            raise NonFiniteLoss(mean, step, self.last_finite)
        if batch == 0:  # the batches before, in batch sizes (all full before a resume point)
            size = self.loss_sums()[1] - self.count
            self.before = self.count / size if size else 0.0
        # This batch's own loss, as Lightning reports it, out of the mean over ``batch + 1``.
        done = self.before + batch
        loss = mean * (done + 1) - self.mean * done
        self.mean = mean
        self.last_finite = (step, loss)
        if self.micro == 1:  # the run's first batch
            self.first = loss


def save_state(model, path: Path, keep: int, position: dict) -> None:
    """Every model variable (weights, BatchNorm statistics, dropout seed-generator states)
    and every optimizer variable, by index, plus the loop position, as one safetensors."""
    tensors = {f"model/{i}": np.asarray(v.numpy()) for i, v in enumerate(model.variables)}
    # A state with NaN weights would replace the last good one and resume into nothing.
    bad = [v.path for v in model.trainable_variables if not np.isfinite(v.numpy()).all()]
    if bad:
        raise NonFiniteWeights(position["step"], bad)
    check_run_folder(path.parent.parent)  # never a state/ folder recreated in place of a deleted run
    tensors |= {f"optimizer/{i}": np.asarray(v.numpy()) for i, v in enumerate(model.optimizer.variables)}
    # The epoch's metric sums so far (loss tracker, compiled metrics): a mid-epoch resume
    # continues them, so the epoch's row is over all of its batches.
    if not across_workers(model):  # the chief alone saves: reading metric sums would be a collective
        tensors |= {f"metrics/{i}": np.asarray(v.numpy()) for i, v in enumerate(model.metrics_variables)}
    tensors = {k: np.require(v, requirements="C") for k, v in tensors.items()}
    temporary = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(temporary), metadata={"position": json.dumps(position), "framework": "keras"})
    state.commit(temporary, path, keep)


def load_state(model, path: Path) -> dict:
    """Restore what :func:`save_state` wrote into a compiled model with a built optimizer."""
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


def saved_threads(path: Path) -> int | None:
    """The kernel threads a state was trained with (None in states written before zoo kept them):
    read from its header alone, before TensorFlow starts and its thread count is fixed."""
    with safe_open(str(path), framework="np") as handle:
        position = json.loads((handle.metadata() or {}).get("position", "null"))
    return position.get("num_threads") if isinstance(position, dict) else None


def saved_epoch(path: Path, batches_done: int) -> dict | None:
    """The epoch so far as a mid-epoch state saved it (its seconds and metric sums by index), or
    None for a state written before zoo kept them (that epoch's row then covers the rest only)."""
    if not path.is_file():
        return None
    with safe_open(str(path), framework="np") as handle:
        position = json.loads((handle.metadata() or {}).get("position", "null"))
        if not isinstance(position, dict) or position.get("batches_done") != batches_done:
            return None
        names = [k for k in handle.keys() if k.startswith("metrics/")]  # noqa: SIM118
        metrics = {int(k.split("/")[1]): handle.get_tensor(k) for k in names}
    seconds = float(position.get("epoch_seconds", 0.0))
    return {"epoch": position["epoch"], "seconds": seconds, "metrics": metrics}


class SaveState(BatchCounter):
    """The full training state every N optimizer steps and at every epoch end.

    A SIGTERM or Ctrl-C (zoo.runs.signals) stops ``fit`` at the end of the optimizer step in progress,
    after saving the state there; in an epoch's last step, at the epoch end, after validation,
    its metrics row and its state. ``losses`` gives the run's first batch loss to the states.
    """

    def __init__(
        self, run_dir: Path, batches_per_epoch: int, every_n_steps: int | None, keep: int,
        losses: StopOnNonFiniteLoss | None = None, threads: int | None = None, early=None,
    ):  # fmt: skip
        super().__init__()
        self.early = early  # zoo.early_stopping.EarlyStopping: its decision goes in every state
        self.run_dir, self.batches = Path(run_dir), batches_per_epoch
        self.every_n_steps, self.keep, self.losses, self.threads = every_n_steps, keep, losses, threads
        self.saved = -1
        self.epoch_started = time.perf_counter()
        self.resumed_metrics: dict | None = None  # metric sums of a mid-epoch state, until put back
        self.step_ended = False  # whether the last training batch ended an optimizer step

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self.micro % self.batches == 0:
            return
        # Resumed mid-epoch: the state this fit continues is the one saved at this step.
        optimizer = training_optimizer(self.model)
        path = state.state_path(self.run_dir, int(optimizer.iterations.numpy()), "safetensors")
        resumed = saved_epoch(path, self.micro)
        if resumed is not None:
            _RESUMED[self.model] = resumed
            self.resumed_metrics = resumed["metrics"]

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_started = time.perf_counter()
        if not self.resumed_metrics:
            return
        # After fit's reset_metrics: the loss tracker's sums go back now, before the first batch
        # (the other callbacks read its running mean). The compiled metrics are built by the
        # first batch; their sums are added after it (one float addition, the same either way).
        variables = self.model.metrics_variables
        for i, variable in enumerate(variables):
            saved = self.resumed_metrics.get(i)
            if saved is not None and tuple(saved.shape) == tuple(variable.shape):
                variable.assign(self.resumed_metrics.pop(i))

    def on_train_batch_end(self, batch, logs=None):
        if self.resumed_metrics:
            metrics, self.resumed_metrics = self.resumed_metrics, None
            variables = self.model.metrics_variables
            for i, saved in metrics.items():
                if i < len(variables) and tuple(saved.shape) == tuple(variables[i].shape):
                    variables[i].assign_add(saved)
        steps, at_step_end = self.count_batch()
        self.step_ended = at_step_end
        if at_step_end and self.every_n_steps and steps % self.every_n_steps == 0:
            self.save()
        if at_step_end and signals.requested() and batch + 1 < self.params.get("steps", 0):
            self.save()
            raise signals.stop()  # Terminated (SIGTERM) or Interrupted (Ctrl-C)

    def stopped_by(self, error: BaseException) -> None:
        """``fit`` ended with ``error``: a batch the data could not give (a shard changed under
        the run) stops it as SIGTERM does, the state of the optimizer step before it saved
        (none of the failed batch's step ran), so zoo resume continues once the data is fixed."""
        if unreadable_batch(error) and self.step_ended:
            self.save()

    def save(self) -> None:
        optimizer = training_optimizer(self.model)
        batches_done = int(optimizer._iterations.numpy())  # micro-batches, accumulation included
        if batches_done == self.saved:
            return
        epoch, index = divmod(batches_done, self.batches)
        step = int(optimizer.iterations.numpy())
        seconds = resumed_seconds(self.model, epoch) + time.perf_counter() - self.epoch_started
        position = {
            "batches_done": batches_done, "epoch": epoch, "batch": index, "step": step,
            "epoch_seconds": seconds if index else 0.0,
            "first_batch_loss": self.losses.first if self.losses else None, "num_threads": self.threads,
            **({"early_stopping": self.early.state()} if self.early is not None else {}),
        }  # fmt: skip
        save_state(self.model, state.state_path(self.run_dir, step, "safetensors"), self.keep, position)
        self.saved = batches_done

    def on_epoch_end(self, epoch, logs=None):
        self.save()
        if signals.requested():
            raise signals.stop()


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

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:  # once an epoch: a resumed epoch's mean starts from the batches before
            self.mean, self.weight = self.loss_sums()

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
