"""Lightning callbacks that write zoo's run files."""

from __future__ import annotations

import math
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities.exceptions import SIGTERMException

from zoo.checkpoint import state
from zoo.data.stream import unreadable_batch
from zoo.hardware import kernel_threads
from zoo.metrics_file import MetricsLog
from zoo.runs import NonFiniteLoss, NonFiniteWeights, check_run_folder, signals
from zoo.tracking import Tracker, step_scalars

# Every hook a Lightning callback can implement (the checkpoint-state methods are not hooks).
HOOKS = tuple(name for name in vars(L.Callback) if name.startswith(("on_", "setup", "teardown")))


class CallbackGroup(L.Callback):
    """zoo's callbacks as one Lightning callback: each hook calls, in order, the members that
    implement it.

    Lightning calls every hook of every callback, implemented or not, each inside a profiler
    context: about 3 us per callback and hook, and a training step has six hooks. zoo's six
    callbacks cost a small model ~0.1 ms a step that way (2.5 % of an rnn-small step); as one
    group, a hook no member implements is one empty call.
    """

    def __init__(self, *members: L.Callback):
        self.members = members
        for hook in HOOKS:
            inherited = getattr(L.Callback, hook)
            calls = [getattr(m, hook) for m in members if getattr(type(m), hook) is not inherited]
            if calls:
                setattr(self, hook, _in_turn(calls))


def _in_turn(calls):
    def hook(*args, **kwargs):
        for call in calls:
            call(*args, **kwargs)

    return hook


class EpochMetrics(L.Callback):
    """One CSV row per epoch, in the columns the Keras side writes too; the tracker (TensorBoard,
    MLflow) gets the same row.

    A training state saved mid-epoch carries the epoch so far (the task's metric sums over every
    process, and the seconds spent), so that after a resume the epoch's row means every batch of
    the epoch and times all of it, as an uninterrupted run's row does.
    """

    KEY = "zoo_epoch_progress"

    def __init__(self, log: MetricsLog | None, tracker: Tracker | None = None):
        self.metrics_log = log
        self.tracker = tracker
        self.started = 0.0
        self.before = 0.0  # seconds of this epoch spent before a resume
        self.resumed: dict | None = None  # the saved epoch progress, until it is put back

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        import torch

        seconds = self.before + time.perf_counter() - self.started
        progress = {"epoch": trainer.current_epoch, "seconds": seconds}
        sums = getattr(pl_module, "sums", {}).get("train")
        if sums is not None and sums.total is not None:
            # Every rank calls this together (a save is collective); rank 0 writes the sums of all.
            count = torch.tensor([sums.count], dtype=sums.total.dtype, device=sums.total.device)
            totals = trainer.strategy.reduce(torch.cat([sums.total, count]), reduce_op="sum")
            progress |= {"names": list(sums.names), "totals": totals[:-1].cpu(), "count": int(totals[-1])}
            if sums.counts is not None:  # macro F1's confusion counts (trainer.metrics)
                progress["counts"] = trainer.strategy.reduce(sums.counts, reduce_op="sum").cpu()
        checkpoint[self.KEY] = progress

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self.resumed = checkpoint.get(self.KEY)  # states written before zoo kept it have none

    def on_train_start(self, trainer, pl_module):
        # Lightning calls no on_train_epoch_start for an epoch it restarts mid-way: the clock of
        # a resumed epoch starts here, after the seconds the state says were spent on it.
        self.started, self.before = time.perf_counter(), 0.0
        if self.resumed and self.resumed["epoch"] == trainer.current_epoch:
            self.before = float(self.resumed["seconds"])
        else:
            self.resumed = None

    def on_train_epoch_start(self, trainer, pl_module):
        self.started, self.before = time.perf_counter(), 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # Before the task's first step of the resumed epoch adds to its sums.
        if self.resumed is None:
            return
        resumed, self.resumed = self.resumed, None
        if "totals" not in resumed:
            return
        from zoo.lightning.task import EpochSums

        sums = EpochSums(list(resumed["names"]), getattr(pl_module, "extra", ()))
        totals = resumed["totals"].to(pl_module.device)
        # The sums are over all ranks already: rank 0 holds them, the others start from zero.
        sums.total = totals if trainer.is_global_zero else totals.zero_()
        if resumed.get("counts") is not None:
            counts = resumed["counts"].to(pl_module.device)
            sums.counts = counts if trainer.is_global_zero else counts.zero_()
        sums.count = int(resumed["count"]) if trainer.is_global_zero else 0
        pl_module.sums["train"] = sums

    def on_train_epoch_end(self, trainer, pl_module):
        if self.metrics_log is None or not trainer.is_global_zero:
            return
        check_run_folder(self.metrics_log.path.parent)  # never a headerless metrics.csv in a recreated folder
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}  # reduced over ranks already
        row = {k: metrics[k] for k in self.metrics_log.columns if k in metrics}
        row["epoch"] = trainer.current_epoch + 1
        row["step"] = trainer.global_step
        row["lr"] = trainer.optimizers[0].param_groups[0]["lr"]
        row["epoch_seconds"] = self.before + time.perf_counter() - self.started
        self.metrics_log.append(row)
        if self.tracker is not None:
            self.tracker.epoch(row)

    def on_train_end(self, trainer, pl_module):
        if self.tracker is not None and trainer.is_global_zero:
            self.tracker.flush()


class TensorBoardWriter:
    """Lightning's TensorBoardLogger on ``run/tb`` (no version subfolders: one run, one folder),
    written to by zoo's callbacks with zoo's tags; the Trainer itself keeps ``logger=False``, so
    the task's ``self.log`` names and Lightning's per-step logger bookkeeping stay out of it."""

    def __init__(self, folder: Path):
        self.logger = tensorboardx_logger(folder)

    def write(self, scalars: dict[str, float], step: int) -> None:
        self.logger.log_metrics(scalars, step=step)

    def flush(self) -> None:
        self.logger.experiment.flush()


def tensorboardx_logger(folder: Path):
    """A TensorBoardLogger that writes with tensorboardX, which Lightning only falls back to.

    Lightning prefers ``torch.utils.tensorboard`` when the ``tensorboard`` package is installed
    (it is: it is the viewer), and that writer imports the whole of TensorFlow through
    ``tensorboard.compat`` when TensorFlow is installed (it is): 3.7 s and TensorFlow's thread
    pools in a torch process, to write a few scalars. tensorboardX writes the same event files
    without it.
    """

    class TensorBoardXLogger(TensorBoardLogger):
        @property
        @rank_zero_experiment
        def experiment(self):
            if self._experiment is None:
                from tensorboardX import SummaryWriter

                self._experiment = SummaryWriter(log_dir=self.log_dir, **self._kwargs)
            return self._experiment

    return TensorBoardXLogger(
        save_dir=str(folder.parent), name=folder.name, version="", default_hp_metric=False
    )


class StepScalars(L.Callback):
    """Loss, learning rate, gradient norm and samples/s every ``tracking.log_every_n_steps``
    optimizer steps. The gradient norm is computed only before a step that is logged."""

    def __init__(self, tracker: Tracker, batch_size: int):
        self.tracker, self.batch_size = tracker, batch_size
        self.losses: list[float] = []  # this optimizer step's batch losses
        self.grad_norm: float | None = None
        self.window_started, self.window_samples = time.perf_counter(), 0

    def on_train_start(self, trainer, pl_module):
        self.window_started, self.window_samples = time.perf_counter(), 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        # Lightning calls this after unscaling (16-mixed) and before clipping: the norm
        # clip_grad_norm_ would see.
        if not self.tracker.wants_step(trainer.global_step + 1):
            return
        import torch

        norms = [p.grad.detach().float().norm() for p in pl_module.parameters() if p.grad is not None]
        self.grad_norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        accumulate = trainer.accumulate_grad_batches
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        # Lightning hands back the loss divided by the accumulation (what it backpropagates).
        self.losses.append(float(loss) * accumulate)
        self.window_samples += _batch_size(batch, self.batch_size)
        if (batch_idx + 1) % accumulate and not trainer.is_last_batch:
            return
        step, losses = trainer.global_step, self.losses
        self.losses = []
        if not self.tracker.wants_step(step) or not trainer.is_global_zero:
            return
        now = time.perf_counter()
        rate = self.window_samples * trainer.world_size / (now - self.window_started)
        lr = trainer.optimizers[0].param_groups[0]["lr"]  # the rate of the next update, as the CSV's
        self.tracker.step(step, step_scalars(sum(losses) / len(losses), lr, self.grad_norm, rate))
        self.grad_norm = None
        self.window_started, self.window_samples = now, 0


def _batch_size(batch, default: int) -> int:
    """Samples in a batch (its last tensor holds the labels): an epoch's last batch is smaller."""
    labels = batch[-1] if isinstance(batch, list | tuple) else batch
    return int(labels.shape[0]) if hasattr(labels, "shape") else default


class StopOnNonFiniteLoss(L.Callback):
    """Stop at the first non-finite training loss, saying where and what came before. Keeps the
    run's first batch loss (in the training states too), which zoo.runs.growth compares the last
    epoch's loss with."""

    KEY = "zoo_first_batch_loss"

    def __init__(self):
        self.last_finite: tuple[int, float] | None = None
        self.first: float | None = None
        self.fresh = False  # the run starts here, not from a state

    def on_train_start(self, trainer, pl_module):
        self.fresh = trainer.global_step == 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = float(outputs["loss"]) if isinstance(outputs, dict) else float(outputs)
        if not math.isfinite(loss):
            raise NonFiniteLoss(loss, trainer.global_step, self.last_finite)
        self.last_finite = (trainer.global_step, loss)
        if self.fresh and self.first is None:
            self.first = loss * trainer.accumulate_grad_batches  # Lightning hands back loss / accumulation

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint[self.KEY] = self.first

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self.first = checkpoint.get(self.KEY)  # states written before zoo kept it have none


class KernelThreads(L.Callback):
    """torch's CPU thread count for the run (zoo.hardware.kernel_threads), kept in its training
    states: a resume computes with the count the run was trained with, unless the recipe sets one."""

    KEY = "zoo_num_threads"

    def __init__(self, trainer_cfg, processes: int = 1):
        self.trainer_cfg, self.processes = trainer_cfg, processes
        self.count = self.apply()

    def apply(self, recorded: int | None = None) -> int:
        import torch

        self.count = kernel_threads(self.trainer_cfg, recorded, self.processes)
        torch.set_num_threads(self.count)
        return self.count

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint[self.KEY] = self.count

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self.apply(checkpoint.get(self.KEY))  # states written before zoo kept it have none


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
    written to a temporary name and renamed (a kill mid-save keeps the previous state).

    On SIGTERM Lightning ends ``fit`` with its ``SIGTERMException`` at the next batch end, and
    calls ``on_exception`` first: the state is saved there. zoo holds Lightning's flag where a
    stop would lose work or leave an epoch half done, as the Keras side stops: between the
    batches of one accumulated step (whose gradients no state holds), and in an epoch's last
    step or its validation (the epoch ends first: its metrics row and state). See zoo.runs.signals.
    """

    def __init__(self, run_dir: Path, every_n_steps: int | None, keep: int):
        self.run_dir, self.every_n_steps, self.keep = Path(run_dir), every_n_steps, keep
        self.saved_step = -1
        self.step_ended = False  # whether the last training batch ended an optimizer step
        self.sigterm_held = False  # a SIGTERM that waits for the optimizer step to end

    def save(self, trainer) -> None:
        if trainer.global_step == self.saved_step:
            return
        check_run_folder(self.run_dir)  # never a state/ folder recreated in place of a deleted run
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
        self.step_ended = (batch_idx + 1) % trainer.accumulate_grad_batches == 0 or trainer.is_last_batch
        if self.every_n_steps and self.step_ended and trainer.global_step % self.every_n_steps == 0:
            self.save(trainer)
        self.hold_sigterm(trainer, release=self.step_ended and not trainer.is_last_batch)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.hold_sigterm(trainer, release=False)

    def on_train_epoch_end(self, trainer, pl_module):
        self.save(trainer)
        self.hold_sigterm(trainer, release=True)  # Lightning stops after this epoch end

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.hold_sigterm(trainer, release=True)  # a Ctrl-C while testing stops it, as SIGTERM does

    def hold_sigterm(self, trainer, release: bool) -> None:
        """Let a SIGTERM stop the loop now (``release``) or hold it until it can stop cleanly.
        Lightning reads its signal connector's flag after these hooks and has no public way to wait.
        A Ctrl-C, which Lightning does not watch, raises the same flag (zoo.runs.signals)."""
        connector = trainer._signal_connector
        if signals.requested() and not self.sigterm_held:
            connector.received_sigterm = True
        if connector.received_sigterm or self.sigterm_held:
            connector.received_sigterm, self.sigterm_held = release, not release

    def on_exception(self, trainer, pl_module, exception):
        # A batch the data could not give (a shard changed under the run) stops it as SIGTERM
        # does: the steps before it are saved, and zoo resume continues once the data is fixed.
        stops = isinstance(exception, SIGTERMException) or unreadable_batch(exception)
        if stops and trainer.training and self.step_ended:
            self.save(trainer)
