"""Lightning callbacks that write zoo's run files."""

from __future__ import annotations

import time

import lightning as L

from zoo.runs import MetricsLog


class EpochMetrics(L.Callback):
    """One CSV row per epoch, in the columns the Keras side writes too."""

    def __init__(self, log: MetricsLog | None):
        self.metrics_log = log
        self.started = 0.0

    def on_train_epoch_start(self, trainer, pl_module):
        self.started = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        if self.metrics_log is None or not trainer.is_global_zero:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        row = {k: metrics[k] for k in self.metrics_log.columns if k in metrics}
        row["epoch"] = trainer.current_epoch + 1
        row["step"] = trainer.global_step
        row["lr"] = trainer.optimizers[0].param_groups[0]["lr"]
        row["epoch_seconds"] = time.perf_counter() - self.started
        self.metrics_log.append(row)
