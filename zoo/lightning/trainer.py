"""Train a torch twin with Lightning's Trainer, as a recipe says.

The step itself (task, step options, loader) comes from the step kit, zoo.lightning.steps;
this module adds the loop around it: devices and strategy, callbacks (metrics, tracking,
training states, resume position), the Trainer's fit and test, and how they stop.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy
from lightning.pytorch.utilities.exceptions import SIGTERMException

from zoo.checkpoint.file import CheckpointError
from zoo.data import steps_per_epoch
from zoo.early_stopping import EarlyStopping, check_validation
from zoo.hardware import SetupError, check_trainer, ddp_timeout_s, resolve_accelerator
from zoo.initial_weights import seeded_torch_model
from zoo.lightning.callbacks import (
    CallbackGroup,
    EpochMetrics,
    KernelThreads,
    ResumePosition,
    SaveState,
    StepScalars,
    StopOnNonFiniteLoss,
    TensorBoardWriter,
)
from zoo.lightning.data import loader
from zoo.lightning.early_stopping import StopEarly
from zoo.lightning.steps import LightningSteps, quiet
from zoo.metrics_file import MetricsLog
from zoo.progress import EpochLines, bar_on_stderr, training_progress
from zoo.runs import signals
from zoo.runs.export import best_exporter
from zoo.schedule import lr_table, optimizer_steps, run_length
from zoo.tracking import open_tracker

if TYPE_CHECKING:
    from zoo.plan import RunPlan


def strategy_for(trainer_cfg):
    strategy = trainer_cfg.resolved_strategy()
    if strategy == "ddp":
        return DDPStrategy(timeout=timedelta(seconds=ddp_timeout_s()))
    if strategy == "fsdp":
        return FSDPStrategy(timeout=timedelta(seconds=ddp_timeout_s()))
    return "auto"


def check_accelerator(trainer_cfg) -> str:
    accelerator = resolve_accelerator(trainer_cfg.accelerator)
    if accelerator == "gpu":
        available = torch.cuda.device_count()
        if available == 0:
            raise SetupError(
                "trainer.accelerator is 'gpu' but torch sees no CUDA GPU here; use 'cpu' or 'auto'"
            )
        if trainer_cfg.devices > available:
            raise SetupError(f"trainer.devices is {trainer_cfg.devices} but torch sees {available} GPU(s)")
    return accelerator


class Restored(L.Callback):
    """``done`` once Lightning has restored a resume state and starts training; ``exception``,
    what interrupted ``fit`` or ``test`` (Lightning calls ``on_exception`` before it exits)."""

    done = False
    exception: BaseException | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.done = True

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.exception = exception


@contextlib.contextmanager
def zoo_stops(restored: Restored):
    """Lightning's ``fit`` and ``test`` as zoo's runs stop: Lightning ends them with ``SystemExit``
    on Ctrl-C (status 1, after saying nothing at zoo's log level) and on SIGTERM (status 0: a
    preempted run would look finished). zoo raises :class:`Terminated` (SIGTERM),
    :class:`~zoo.runs.Interrupted` (a first Ctrl-C, once the step ended) and KeyboardInterrupt (a
    second one) instead, as the Keras side does, and zoo.runs.record_stop says what is kept."""
    try:
        with signals.loop_stops():  # Lightning's own SIGTERM handler stops its loops; zoo's waits
            yield
    except SIGTERMException:  # SIGTERM, or a Ctrl-C that SaveState raised Lightning's flag for
        raise signals.stop() from None
    except SystemExit:
        if isinstance(restored.exception, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise


@dataclass(frozen=True)
class Loop:
    """What ``fit`` hands Lightning around the step: the callbacks, and the ones it reads back
    (the first batch's loss; whether a resume state was restored, what stopped the loop)."""

    callbacks: list[Any]
    losses: StopOnNonFiniteLoss
    restored: Restored
    progress: str  # "bar", "lines" or "none" (zoo.progress.training_progress)
    early: EarlyStopping | None = None  # trainer.early_stopping's decision


def fit(plan: RunPlan) -> tuple[torch.nn.Module, dict[str, float]]:
    """Train, validate every epoch, test; return the trained twin and the test metrics."""
    trainer_cfg = plan.recipe.trainer
    check_trainer(trainer_cfg)
    quiet()
    accelerator = check_accelerator(trainer_cfg)
    processes = trainer_cfg.devices if trainer_cfg.resolved_strategy() in ("ddp", "fsdp") else 1
    threads = KernelThreads(trainer_cfg, processes)  # before any kernel runs; a resume's, when restored
    model = seeded_model(plan)
    batches = steps_per_epoch(len(plan.dataset.train), plan.recipe.data.batch_size)
    updates = optimizer_steps(batches, trainer_cfg.accumulate_grad_batches)
    epochs, total = run_length(trainer_cfg, updates)
    table = lr_table(plan.recipe.schedule, plan.recipe.optimizer.lr, updates, epochs, total)
    pin = accelerator == "gpu"  # decoded image batches go to the GPU from page-locked memory
    steps = LightningSteps.for_run(plan.steps, model, table, pin_memory=pin)
    loop = loop_callbacks(plan, steps, batches, threads, epochs)
    trainer = build_trainer(plan, accelerator, steps, loop, (epochs, total))
    seconds = train(plan, trainer, steps, loop, pin)
    test_loader = loader(plan.dataset.test, plan.recipe.data.eval_batch_size, pin_memory=pin)
    with bar_on_stderr(loop.progress), zoo_stops(loop.restored):
        results = trainer.test(steps.task, test_loader, verbose=False)[0]
    model.eval()
    metrics = {k: float(v) for k, v in results.items()} | (loop.early.outcome() if loop.early else {})
    first = loop.losses.first  # zoo.runs.growth compares the last epoch's loss with it
    return model, {
        **metrics, "train_seconds": seconds, "replicas": trainer.world_size, "num_threads": threads.count,
        **({"train_loss_first_batch": first} if first is not None else {}),
    }  # fmt: skip


def seeded_model(plan: RunPlan) -> torch.nn.Module:
    """The torch twin of the plan's seed (every framework starts from the same tensors), with
    gradient checkpointing as the recipe says."""
    trainer_cfg = plan.recipe.trainer
    L.seed_everything(trainer_cfg.seed, verbose=False)
    model = seeded_torch_model(plan.family, plan.config, trainer_cfg.seed)
    plan.family.set_grad_checkpointing(model, "lightning", trainer_cfg.gradient_checkpointing)
    return model


def loop_callbacks(
    plan: RunPlan, steps: LightningSteps, batches: int, threads: KernelThreads, epochs: int
) -> Loop:
    """The callbacks of a run: the progress bar, epoch metrics and tracking, the non-finite loss
    stop, the resume position, training states and the kernel threads."""
    recipe, run, dataset = plan.recipe, plan.run, plan.dataset
    trainer_cfg = recipe.trainer
    # Before the first step: a tracking store that refuses the run fails it now.
    tracker = open_tracker(recipe, run.path if run else None, len(dataset.train), TensorBoardWriter)
    progress = training_progress(trainer_cfg.progress_bar)
    lines = EpochLines(epochs) if progress == "lines" else None
    resumed = plan.resume is not None
    metrics_log = (
        MetricsLog(
            run.metrics,
            dataset.task,
            append=resumed,
            echo=lines,
            tokenizer=dataset.tokenizer,
            extra=trainer_cfg.metrics,
        )
        if run
        else None
    )
    early = EarlyStopping.from_recipe(trainer_cfg.early_stopping)
    check_validation(early, len(dataset.val))
    callbacks = [
        # tqdm refreshed every few steps: Lightning's default Rich bar costs more per step
        # than a small model's step takes.
        *([TQDMProgressBar(refresh_rate=20)] if progress == "bar" else []),
        CallbackGroup(
            EpochMetrics(metrics_log, tracker),
            losses := StopOnNonFiniteLoss(),
            *([StepScalars(tracker, recipe.data.batch_size)] if tracker and tracker.writer else []),
            ResumePosition(steps.loader.sampler, batches, trainer_cfg.seed),
            *([StopEarly(early, best_exporter(plan))] if early else []),
            SaveState(plan.folder, recipe.export.state_every_n_steps, recipe.export.keep_states),
            threads,
            restored := Restored(),
        ),
    ]
    return Loop(callbacks, losses, restored, progress, early)


def build_trainer(
    plan: RunPlan, accelerator: str, steps: LightningSteps, loop: Loop, length: tuple[int, int]
) -> L.Trainer:
    """Lightning's Trainer for the recipe's devices and strategy, with the kit's step options,
    training ``length`` (epochs, optimizer steps: zoo.schedule.run_length); zoo's callbacks do the
    logging, checkpointing and progress lines. Lightning's own ``max_steps`` is not used: a run it
    stopped at an epoch's end resumed (``--force``, the steps raised) into that epoch again here
    (Lightning 2.6); the task asks for the stop instead (``Task.last_step``), as early stopping does."""
    trainer_cfg = plan.recipe.trainer
    steps.task.last_step = length[1] if trainer_cfg.max_steps is not None else None
    return L.Trainer(
        max_epochs=length[0],  # and the task stops at length[1] steps (Task.last_step)
        accelerator=accelerator,
        devices=trainer_cfg.devices,
        num_nodes=trainer_cfg.num_nodes,
        strategy=strategy_for(trainer_cfg),
        **steps.options,
        use_distributed_sampler=False,  # zoo's sampler shards the one seeded order itself
        logger=False,  # TensorBoard/MLflow are written by zoo's callbacks, in zoo's tags (zoo.tracking)
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=loop.progress == "bar",
        num_sanity_val_steps=0,
        callbacks=loop.callbacks,
        default_root_dir=plan.run.path if plan.run else None,
    )


def train(plan: RunPlan, trainer: L.Trainer, steps: LightningSteps, loop: Loop, pin: bool) -> float:
    """Lightning's fit of the step (from ``plan.resume`` when it names a state); its seconds."""
    dataset, resume = plan.dataset, plan.resume
    eval_batch = plan.recipe.data.eval_batch_size
    val_loader = loader(dataset.val, eval_batch, pin_memory=pin) if len(dataset.val) else None
    started = time.perf_counter()
    # The state is zoo's own file from this run's folder; loaded without unpickling objects.
    with bar_on_stderr(loop.progress), zoo_stops(loop.restored):
        try:
            trainer.fit(
                steps.task, steps.loader, val_loader, ckpt_path=resume, weights_only=bool(resume) or None
            )
        except Exception as error:
            if resume is None or loop.restored.done:
                raise
            # Lightning restores the weights before any callback sees the state: what it cannot
            # restore is the state's fault, said as such (zoo.checkpoint.state.check_state catches
            # most before).
            raise CheckpointError(
                f"{resume}: Lightning cannot restore this training state ({type(error).__name__}: "
                f"{error}); it is damaged or was changed since zoo wrote it: delete it to resume from the "
                "state before"
            ) from None
    return time.perf_counter() - started
