"""Lightning callbacks that write zoo's run files."""

from __future__ import annotations

import math
import time
from pathlib import Path

import lightning as L

from zoo import state
from zoo.runs import MetricsLog, NonFiniteLoss, NonFiniteWeights


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
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}  # reduced over ranks already
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


class ResumePosition(L.Callback):
    """Continue the seeded batch order where a restored state stopped, and seed every
    batch from its position in the run, so a resumed run replays the uninterrupted one."""

    def __init__(self, sampler, batches_per_epoch: int, seed: int):
        self.sampler, self.batches_per_epoch, self.seed = sampler, batches_per_epoch, seed
        self.position = 0  # training batches done in the whole run

    def on_train_start(self, trainer, pl_module):
        self.position = trainer.global_step * trainer.accumulate_grad_batches
        self.sampler.set_epoch(trainer.current_epoch)
        self.sampler.skip = self.position - trainer.current_epoch * self.batches_per_epoch

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import torch

        epoch, index = divmod(self.position, self.batches_per_epoch)
        seed = state.batch_seed(self.seed, epoch, index)
        # Only the generators this process draws from: torch.manual_seed also visits every
        # other device type and costs 0.24 ms, a tenth of a small model's step.
        torch.default_generator.manual_seed(seed)
        if pl_module.device.type == "cuda":
            torch.cuda.manual_seed(seed)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.position += 1


class SaveState(L.Callback):
    """Lightning's full training state every N optimizer steps and at every epoch end,
    written to a temporary name and renamed (a kill mid-save keeps the previous state)."""

    def __init__(self, run_dir: Path, every_n_steps: int | None, keep: int):
        self.run_dir, self.every_n_steps, self.keep = Path(run_dir), every_n_steps, keep
        self.saved_step = -1

    def save(self, trainer) -> None:
        if trainer.global_step == self.saved_step:
            return
        # A state with NaN weights would replace the last good one and resume into nothing;
        # every rank holds the same weights, so every rank stops here together.
        bad = [n for n, p in trainer.lightning_module.named_parameters() if not p.isfinite().all()]
        if bad:
            raise NonFiniteWeights(trainer.global_step, bad)
        final = state.state_path(self.run_dir, trainer.global_step, "ckpt")
        temporary = final.with_name(f".{final.name}.tmp")
        final.parent.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(temporary, weights_only=False)  # all ranks take part; rank 0 writes
        if trainer.is_global_zero:
            state.commit(temporary, final, self.keep)
        self.saved_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        at_step_end = (batch_idx + 1) % trainer.accumulate_grad_batches == 0
        if self.every_n_steps and at_step_end and trainer.global_step % self.every_n_steps == 0:
            self.save(trainer)

    def on_train_epoch_end(self, trainer, pl_module):
        self.save(trainer)
