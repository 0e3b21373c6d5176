"""Learning-rate schedules as one table of per-step rates, shared by both frameworks.

Each framework reads rate ``table[step]`` for its ``step``-th update (torch through
``LambdaLR``, Keras through a ``LearningRateSchedule``), so the two cannot drift apart.
"""

from __future__ import annotations

import numpy as np

from zoo.hardware import SetupError


def lr_table(schedule, base_lr: float, steps_per_epoch: int, epochs: int) -> np.ndarray:
    total = steps_per_epoch * epochs
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
