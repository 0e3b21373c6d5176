"""Train a torch twin with Lightning's Trainer, as a recipe says."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import types
import warnings
from datetime import timedelta
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar

from zoo.checkpoint.tables import decay_exempt_tensors
from zoo.data import Dataset, steps_per_epoch
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
from zoo.lightning.task import TASKS
from zoo.precision import lightning_precision
from zoo.progress import EpochLines, bar_on_stderr, training_progress
from zoo.runs import MetricsLog, RunDir, signals
from zoo.schedule import lr_table, optimizer_steps
from zoo.tracking import open_tracker

# zoo's loaders index whole batches in the main process on purpose: workers would only
# add inter-process copies for in-memory arrays.
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*`isinstance\\(treespec, LeafSpec\\)` is deprecated.*")
# zoo's epoch metrics are reduced over the ranks before they are logged.
warnings.filterwarnings("ignore", ".*recommended to use `self.log\\(.*sync_dist=True\\)`.*")


def quiet() -> None:
    # The signal connector's "[rank: 0] Received SIGTERM": zoo says what the signal did (zoo.runs.signals).
    for name in (
        "lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda",
        "lightning.pytorch.trainer.connectors.signal_connector",
    ):  # fmt: skip
        logging.getLogger(name).setLevel(logging.WARNING)


def strategy_for(trainer_cfg):
    strategy = trainer_cfg.resolved_strategy()
    if strategy == "ddp":
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(timeout=timedelta(seconds=ddp_timeout_s()))
    if strategy == "fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

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


def initialise(model: torch.nn.Module, init) -> list[dict]:
    """Load a fine-tuning start into ``model``; return the optimizer's parameter groups
    (the head may have its own rate; a frozen backbone is left out)."""
    from zoo.checkpoint.tensors import load_tensors, model_tensors
    from zoo.finetune import merged_tensors

    named = list(model.named_parameters())
    if init is None:
        return [{"params": [p for _, p in named]}]
    load_tensors(model, merged_tensors(init, model_tensors(model)))
    backbone = [p for n, p in named if n not in init.head]
    head = [p for n, p in named if n in init.head]
    if init.freeze_backbone:
        for parameter in backbone:
            parameter.requires_grad_(False)
        backbone = []
        hold_frozen_norms_in_eval(model)
    groups = [{"params": backbone}] if backbone else []
    return [*groups, {"params": head, **({"lr": init.head_lr} if init.head_lr else {})}]


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
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        with signals.loop_stops():  # Lightning's own SIGTERM handler stops its loops; zoo's waits
            yield
    except SIGTERMException:  # SIGTERM, or a Ctrl-C that SaveState raised Lightning's flag for
        raise signals.stop() from None
    except SystemExit:
        if isinstance(restored.exception, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise


def without_decay(groups: list[dict], model: torch.nn.Module, table) -> list[dict]:
    """Each parameter group split in two: its decayed tensors, and its exempt ones with
    ``weight_decay`` 0 (zoo.checkpoint.tables.decay_exempt_tensors decides, for both frameworks)."""
    names = decay_exempt_tensors(table)
    exempt = {id(p) for n, p in model.named_parameters() if n in names}
    split = []
    for group in groups:
        params = list(group["params"])
        decayed = [p for p in params if id(p) not in exempt]
        undecayed = [p for p in params if id(p) in exempt]
        split += [{**group, "params": decayed}] if decayed else []
        split += [{**group, "params": undecayed, "weight_decay": 0.0}] if undecayed else []
    return split


def hold_frozen_norms_in_eval(model: torch.nn.Module) -> None:
    """A BatchNorm whose parameters are all frozen normalises with its running statistics and
    leaves them as they are, whatever ``train()`` Lightning calls: Keras' convention for a
    layer with ``trainable = False``, and what a frozen backbone means to a user (its
    statistics are the source model's, not the small fine-tuning set's)."""
    for module in model.modules():
        parameters = list(module.parameters(recurse=False))
        norm = isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
        if norm and parameters and not any(p.requires_grad for p in parameters):
            module.train = types.MethodType(_stay_in_eval, module)
            module.eval()


def _stay_in_eval(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
    return torch.nn.Module.train(module, False)


def build_task(
    recipe, family, config, task: str, model: torch.nn.Module, table, init=None, compiled=None, metric=None
):
    """The LightningModule ``fit`` trains ``model`` with: the task's loss and metrics (``metric``:
    the data's name for it, :attr:`zoo.data.Dataset.metrics`), and the optimizer's parameter groups
    (a fine-tuned head's rate, a frozen backbone, the tensors exempt from weight decay).
    ``zoo compare`` steps the same module (``compiled=False``)."""
    groups = initialise(model, init)
    if recipe.init.lora is not None:  # adapters on the frozen base: they (and biases asked for) train
        from zoo.lora import attach

        attach(model, family, config, recipe.init.lora, recipe.trainer.seed)
        groups = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    if not recipe.optimizer.decay_biases_and_norms:
        groups = without_decay(groups, model, family.weight_table(config))
    compiled = recipe.trainer.compile if compiled is None else compiled
    return TASKS[task](model, recipe.optimizer, table, compiled=compiled, groups=groups, metric=metric)


def step_options(trainer_cfg) -> dict:
    """The Trainer arguments that decide what one training step computes (precision,
    accumulation, clipping, determinism): ``fit`` and ``zoo compare`` pass the same."""
    return {
        "precision": lightning_precision(trainer_cfg.precision),
        "accumulate_grad_batches": trainer_cfg.accumulate_grad_batches,
        "gradient_clip_val": trainer_cfg.gradient_clip_norm,
        "gradient_clip_algorithm": "norm" if trainer_cfg.gradient_clip_norm else None,
        "deterministic": trainer_cfg.deterministic,
    }


def fit(recipe, config, family, dataset: Dataset, run: RunDir | None, init=None, resume=None):
    """Train, validate every epoch, test; return the trained twin and the test metrics."""
    check_trainer(recipe.trainer)
    quiet()
    trainer_cfg, data_cfg = recipe.trainer, recipe.data
    accelerator = check_accelerator(trainer_cfg)
    processes = trainer_cfg.devices if trainer_cfg.resolved_strategy() in ("ddp", "fsdp") else 1
    threads = KernelThreads(trainer_cfg, processes)  # before any kernel runs; a resume's, when restored
    L.seed_everything(trainer_cfg.seed, verbose=False)
    model = seeded_torch_model(family, config, trainer_cfg.seed)
    family.set_grad_checkpointing(model, "lightning", trainer_cfg.gradient_checkpointing)
    batches = steps_per_epoch(len(dataset.train), data_cfg.batch_size)
    steps = optimizer_steps(batches, trainer_cfg.accumulate_grad_batches)
    table = lr_table(recipe.schedule, recipe.optimizer.lr, steps, trainer_cfg.max_epochs)
    task = build_task(recipe, family, config, dataset.task, model, table, init, metric=dataset.metrics[0])
    pin = accelerator == "gpu"  # decoded image batches go to the GPU from page-locked memory
    train_loader = loader(dataset.train, data_cfg.batch_size, trainer_cfg.seed, data_cfg.shuffle, pin)
    run_path = run.path if run else Path(os.environ.get("ZOO_RUN_DIR", "."))
    # Before the first step: a tracking store that refuses the run fails it now.
    tracker = open_tracker(recipe, run.path if run else None, len(dataset.train), TensorBoardWriter)
    progress = training_progress(trainer_cfg.progress_bar)
    lines = EpochLines(trainer_cfg.max_epochs) if progress == "lines" else None
    resumed = resume is not None
    metrics_log = (
        MetricsLog(run.metrics, dataset.task, append=resumed, echo=lines, tokenizer=dataset.tokenizer)
        if run
        else None
    )
    callbacks = [
        # tqdm refreshed every few steps: Lightning's default Rich bar costs more per step
        # than a small model's step takes.
        *([TQDMProgressBar(refresh_rate=20)] if progress == "bar" else []),
        CallbackGroup(
            EpochMetrics(metrics_log, tracker),
            losses := StopOnNonFiniteLoss(),
            *([StepScalars(tracker, data_cfg.batch_size)] if tracker and tracker.writer else []),
            ResumePosition(train_loader.sampler, batches, trainer_cfg.seed),
            SaveState(run_path, recipe.export.state_every_n_steps, recipe.export.keep_states),
            threads,
            restored := Restored(),
        ),
    ]
    trainer = L.Trainer(
        max_epochs=trainer_cfg.max_epochs,
        accelerator=accelerator,
        devices=trainer_cfg.devices,
        num_nodes=trainer_cfg.num_nodes,
        strategy=strategy_for(trainer_cfg),
        **step_options(trainer_cfg),
        use_distributed_sampler=False,  # zoo's sampler shards the one seeded order itself
        logger=False,  # TensorBoard/MLflow are written by zoo's callbacks, in zoo's tags (zoo.tracking)
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress == "bar",
        num_sanity_val_steps=0,
        callbacks=callbacks,
        default_root_dir=run.path if run else None,
    )
    val_loader = loader(dataset.val, data_cfg.eval_batch_size, pin_memory=pin) if len(dataset.val) else None
    started = time.perf_counter()
    # The state is zoo's own file from this run's folder; loaded without unpickling objects.
    with bar_on_stderr(progress), zoo_stops(restored):
        try:
            trainer.fit(task, train_loader, val_loader, ckpt_path=resume, weights_only=bool(resume) or None)
        except Exception as error:
            if resume is None or restored.done:
                raise
            from zoo.checkpoint.file import CheckpointError

            # Lightning restores the weights before any callback sees the state: what it cannot
            # restore is the state's fault, said as such (zoo.checkpoint.state.check_state catches
            # most before).
            raise CheckpointError(
                f"{resume}: Lightning cannot restore this training state ({type(error).__name__}: "
                f"{error}); it is damaged or was changed since zoo wrote it: delete it to resume from the "
                "state before"
            ) from None
    seconds = time.perf_counter() - started
    test_loader = loader(dataset.test, data_cfg.eval_batch_size, pin_memory=pin)
    with bar_on_stderr(progress), zoo_stops(restored):
        results = trainer.test(task, test_loader, verbose=False)[0]
    model.eval()
    metrics = {k: float(v) for k, v in results.items()}
    first = losses.first  # zoo.runs.growth compares the last epoch's loss with it
    return model, {
        **metrics, "train_seconds": seconds, "replicas": trainer.world_size, "num_threads": threads.count,
        **({"train_loss_first_batch": first} if first is not None else {}),
    }  # fmt: skip
