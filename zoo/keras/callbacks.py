"""Keras callbacks that write zoo's run files."""

from __future__ import annotations

import math
import time

import keras

from zoo.runs import MetricsLog, NonFiniteLoss


class EpochMetrics(keras.callbacks.Callback):
    """One CSV row per epoch, in the columns the Lightning side writes too."""

    def __init__(self, log: MetricsLog, steps_per_epoch: int):
        super().__init__()
        self.metrics_log = log
        self.steps_per_epoch = steps_per_epoch
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


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Stop at the first non-finite training loss (Keras logs the epoch's running mean,
    which turns non-finite with the first bad batch), saying where and what came before."""

    def __init__(self):
        super().__init__()
        self.last_finite: tuple[int, float] | None = None

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", 0.0))
        step = int(self.model.optimizer.iterations.numpy())
        if not math.isfinite(loss):
            raise NonFiniteLoss(loss, step, self.last_finite)
        self.last_finite = (step, loss)
