"""What this machine has, found without importing a framework, and whether a recipe's
trainer section can run on it. Validating a recipe never calls this: a recipe is valid or
not wherever it is read; a run checks the machine when it starts (:func:`check_trainer`)."""

from __future__ import annotations

import functools
import os
from pathlib import Path


class SetupError(RuntimeError):
    """The machine cannot do what the recipe asks (a GPU that is not there, ...)."""


@functools.cache
def gpu_count() -> int:
    """NVIDIA GPUs the driver exposes (what both torch and TensorFlow would see)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = Path("/proc/driver/nvidia/gpus")
    found = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    if visible is not None:
        found = min(found, len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"]))
    return found


def resolve_accelerator(accelerator: str) -> str:
    """``auto`` means the GPU where there is one, as in Lightning and TensorFlow."""
    if accelerator == "auto":
        return "gpu" if gpu_count() else "cpu"
    return accelerator


def check_trainer(trainer) -> str:
    """At the start of a run: refuse what this machine cannot do for the recipe's trainer
    section (float16 or fsdp where ``auto`` finds no GPU), naming the field, the value and
    what would work. Returns the accelerator the run uses."""
    from zoo.recipe.capabilities import cpu_problems

    accelerator = resolve_accelerator(trainer.accelerator)
    if accelerator == "cpu":
        why = f"trainer.accelerator is {trainer.accelerator!r}"
        if trainer.accelerator == "auto":
            why += " and this machine has no GPU"
        problems = cpu_problems(trainer.precision, trainer.strategy, why)
        if problems:
            raise SetupError("; ".join(problems))
    return accelerator
