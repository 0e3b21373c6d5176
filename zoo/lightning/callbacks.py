"""Lightning callbacks that write zoo's run files."""

from __future__ import annotations

import math
import time

import lightning as L

from zoo.runs import MetricsLog, NonFiniteLoss


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


class StopOnNonFiniteLoss(L.Callback):
    """Stop at the first non-finite training loss, saying where and what came before."""

    def __init__(self):
        self.last_finite: tuple[int, float] | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = float(outputs["loss"]) if isinstance(outputs, dict) else float(outputs)
        if not math.isfinite(loss):
            raise NonFiniteLoss(loss, trainer.global_step, self.last_finite)
        self.last_finite = (trainer.global_step, loss)
