"""The Lightning step kit: one training step as zoo takes it, made from a :class:`~zoo.backend.StepPlan`.

This is the one public door to a Lightning training step. ``zoo train``'s loop
(:func:`zoo.lightning.trainer.fit`) and ``zoo compare`` (zoo.compare.steps) both take the
task, the Trainer's step options and the seeded training loader from here, so what compare
checks is what a run trains: the task's loss and metrics, the optimizer's parameter groups (a
fine-tuned head's rate, a frozen backbone, the tensors exempt from weight decay, LoRA
adapters), precision, clipping and accumulation.
"""

from __future__ import annotations

import logging
import types
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from zoo.checkpoint.tables import decay_exempt_tensors
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.finetune import merged_tensors
from zoo.lightning.data import loader
from zoo.lightning.task import TASKS, Task
from zoo.lora import attach, hold_quantized_base
from zoo.precision import lightning_precision

if TYPE_CHECKING:
    from zoo.backend import StepPlan

# zoo's loaders index whole batches in the main process on purpose: workers would only
# add inter-process copies for in-memory arrays.
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*`isinstance\\(treespec, LeafSpec\\)` is deprecated.*")
# zoo's epoch metrics are reduced over the ranks before they are logged.
warnings.filterwarnings("ignore", ".*recommended to use `self.log\\(.*sync_dist=True\\)`.*")


@dataclass(frozen=True)
class LightningSteps:
    """A Lightning training step: the task (loss, metrics, optimizer and scheduler), the
    Trainer arguments that decide what one step computes, and the seeded training loader."""

    task: Task
    options: dict[str, Any]
    loader: DataLoader

    @classmethod
    def for_run(cls, plan: StepPlan, model: torch.nn.Module, table, *, pin_memory: bool) -> LightningSteps:
        """The step ``zoo train`` fits (a fine-tuning start loaded first; torch.compile as the
        recipe says; ``pin_memory`` for batches bound for a GPU)."""
        task = build_task(plan, model, table)
        return cls(task, step_options(plan.recipe.trainer), train_loader(plan, pin_memory=pin_memory))

    @classmethod
    def for_compare(cls, plan: StepPlan, model: torch.nn.Module, table, precision: str) -> LightningSteps:
        """The same step as ``zoo compare`` takes it: eager (no torch.compile), an update after
        every batch, in ``precision`` (a reference pair runs in its own)."""
        task = build_task(plan, model, table, compiled=False)
        options = {**step_options(plan.recipe.trainer), "accumulate_grad_batches": 1}
        options["precision"] = lightning_precision(precision)
        return cls(task, options, train_loader(plan))


def quiet() -> None:
    """Lightning's info lines off: zoo says what a run does. The signal connector's "[rank: 0]
    Received SIGTERM" too: zoo says what the signal did (zoo.runs.signals)."""
    for name in (
        "lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda",
        "lightning.pytorch.trainer.connectors.signal_connector",
    ):  # fmt: skip
        logging.getLogger(name).setLevel(logging.WARNING)


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


def train_loader(plan: StepPlan, *, pin_memory: bool = False) -> DataLoader:
    """The training DataLoader of the plan's seeded order (whole batches)."""
    recipe = plan.recipe
    return loader(plan.dataset.train, plan.batch_size, recipe.trainer.seed, recipe.data.shuffle, pin_memory)


def cpu_trainer(precision: str, **options: Any) -> L.Trainer:
    """A single-CPU Trainer with every reporting switch off (``options`` on top): what ``zoo
    compare`` steps a task in."""
    quiet()
    settings = {
        "accelerator": "cpu",
        "devices": 1,
        "precision": lightning_precision(precision),
        "logger": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "enable_progress_bar": False,
        "num_sanity_val_steps": 0,
        "use_distributed_sampler": False,
        **options,
    }
    return L.Trainer(**settings)


def build_task(plan: StepPlan, model: torch.nn.Module, table, *, compiled: bool | None = None) -> Task:
    """The LightningModule that trains ``model``: the task's loss and metrics (under the data's
    name for its metric, :attr:`zoo.data.Dataset.metrics`) and the optimizer's parameter groups
    (a fine-tuned head's rate, a frozen backbone, the tensors exempt from weight decay).
    ``compiled`` None follows ``trainer.compile``."""
    recipe, family = plan.recipe, plan.family
    groups = initialise(model, plan.init)
    if recipe.init.lora is not None:  # adapters on the frozen base: they (and biases asked for) train
        attach(model, family, plan.config, recipe.init.lora, recipe.trainer.seed)
        hold_quantized_base(model, plan.init)  # QLoRA: a quantized base stays integers
        groups = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    if not recipe.optimizer.decay_biases_and_norms:
        groups = without_decay(groups, model, family.weight_table(plan.config))
    compiled = recipe.trainer.compile if compiled is None else compiled
    metric = plan.dataset.metrics[0]
    return TASKS[plan.dataset.task](
        model, recipe.optimizer, table, compiled=compiled, groups=groups, metric=metric,
        label_smoothing=recipe.trainer.label_smoothing, extra=tuple(recipe.trainer.metrics),
    )  # fmt: skip


def initialise(model: torch.nn.Module, init) -> list[dict]:
    """Load a fine-tuning start into ``model``; return the optimizer's parameter groups
    (the head may have its own rate; a frozen backbone is left out)."""
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
            module.train = types.MethodType(stay_in_eval, module)
            module.eval()


def stay_in_eval(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
    """``train()`` of a frozen BatchNorm: eval mode whatever is asked."""
    return torch.nn.Module.train(module, False)
