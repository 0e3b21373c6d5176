"""Keras callbacks that write zoo's run files."""

from __future__ import annotations

import time

import keras

from zoo.runs import MetricsLog


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
