"""How long a run trains and at what learning rates, shared by both frameworks.

Each framework reads rate ``table[step]`` for its ``step``-th update (torch through
``LambdaLR``, Keras through a ``LearningRateSchedule``), so the two cannot drift apart.
:func:`run_length` turns ``trainer.max_epochs`` and ``trainer.max_steps`` into the epochs and
optimizer steps of a run (Lightning's rule: whichever ends first); Lightning's Trainer is given
both, Keras' ``fit`` the :func:`epoch_spans` that end at the same batch.
"""

from __future__ import annotations

import math

import numpy as np

from zoo.hardware import SetupError
from zoo.recipe.trainer import DEFAULT_EPOCHS, MAX_EPOCHS


def run_length(trainer_cfg, updates_per_epoch: int) -> tuple[int, int]:
    """(epochs, optimizer steps) of a run with ``updates_per_epoch`` optimizer steps an epoch:
    ``max_epochs`` (10 where neither it nor ``max_steps`` is set, as many as ``max_steps`` needs
    where only that is), cut at ``max_steps``. The last epoch may be a part of one."""
    max_epochs, max_steps = trainer_cfg.max_epochs, trainer_cfg.max_steps
    if max_epochs is None:
        max_epochs = DEFAULT_EPOCHS if max_steps is None else math.ceil(max_steps / updates_per_epoch)
    if max_epochs > MAX_EPOCHS:
        raise SetupError(
            f"trainer.max_steps {max_steps:,} takes {max_epochs:,} epochs of {updates_per_epoch} "
            f"optimizer steps; a run has at most {MAX_EPOCHS:,} epochs: lower trainer.max_steps or set "
            "trainer.max_epochs"
        )
    steps = updates_per_epoch * max_epochs
    return max_epochs, steps if max_steps is None else min(steps, max_steps)


def epoch_spans(epoch: int, skip: int, batches: int, total: int) -> list[tuple[int, int, int, int]]:
    """The ``fit`` calls that train from batch ``skip`` of ``epoch`` up to the run's ``total``-th
    batch, epochs of ``batches``: each ``(first epoch, end epoch, batches skipped into the first,
    batches per epoch)``. The rest of a resumed epoch, the whole epochs, then the part of one
    where ``max_steps`` ends the run inside an epoch."""
    whole, tail = divmod(total, batches)
    spans = []
    if skip:  # the rest of the epoch a state stopped in
        end = tail if epoch == whole else batches
        if end > skip:
            spans.append((epoch, epoch + 1, skip, end - skip))
        epoch += 1
    if epoch < whole:
        spans.append((epoch, whole, 0, batches))
        epoch = whole
    if tail and epoch == whole:
        spans.append((whole, whole + 1, 0, tail))
    return spans


def lr_table(
    schedule, base_lr: float, steps_per_epoch: int, epochs: int, total: int | None = None
) -> np.ndarray:
    """One rate per optimizer step of the run: ``total`` steps (all ``epochs`` where None; fewer
    where ``max_steps`` ends the run first, and a cosine decays over those)."""
    total = steps_per_epoch * epochs if total is None else total
    step = np.arange(total, dtype=np.float64)
    warmup = schedule.warmup_steps
    if schedule.name == "constant":
        factor = np.ones(total)
    elif schedule.name == "cosine":
        progress = np.clip((step - warmup) / max(1, total - warmup), 0.0, 1.0)
        factor = schedule.min_lr_ratio + (1 - schedule.min_lr_ratio) * 0.5 * (1 + np.cos(np.pi * progress))
    elif schedule.name == "step":
        factor = schedule.gamma ** ((step // steps_per_epoch) // schedule.step_epochs)
    else:
        raise ValueError(f"schedule.name {schedule.name!r} has no formula")
    if warmup:
        factor = factor * np.minimum(1.0, (step + 1) / warmup)
    return base_lr * factor  # float64: torch's rates are Python doubles, and so are these


def optimizer_steps(batches: int, accumulate: int) -> int:
    if batches % accumulate:
        divisors = [d for d in range(2, batches + 1) if batches % d == 0][:6]
        raise SetupError(
            f"trainer.accumulate_grad_batches {accumulate} does not divide the {batches} training "
            f"batches of an epoch, so Lightning and Keras would update at different steps; "
            f"use one of {divisors} or change data.batch_size"
        )
    return batches // accumulate
