"""What this machine has, found without importing a framework, and whether a recipe's
trainer section can run on it. Validating a recipe never calls this: a recipe is valid or
not wherever it is read; a run checks the machine when it starts (:func:`check_trainer`)."""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from collections.abc import Sequence
from pathlib import Path


class SetupError(RuntimeError):
    """The machine cannot do what the recipe asks (a GPU that is not there, ...)."""


def require_extra(extra: str, modules: Sequence[str], what: str, otherwise: str = "") -> None:
    """Before the work starts: the optional packages ``what`` needs, found without importing them,
    so a missing one is named with the extra that installs it rather than surfacing as an
    exporter's ``ModuleNotFoundError`` halfway through."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise SetupError(
            f"{what} needs {', '.join(missing)}, not installed here; pip install 'zoo[{extra}]'"
            + (f" ({otherwise})" if otherwise else "")
        )


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


DDP_TIMEOUT_VARIABLE = "ZOO_DDP_TIMEOUT_S"
DDP_TIMEOUT_MAX_S = 365 * 86_400  # a year: past ~2.7 million years timedelta itself overflows


def ddp_timeout_s() -> float:
    """Seconds a Lightning ddp/fsdp collective waits for every rank, ``$ZOO_DDP_TIMEOUT_S``
    (600 unset): a collective that only some ranks enter would otherwise block for torch's
    default 30 minutes. Read when a run uses it, so a wrong value fails that run with its name,
    not every command at import."""
    text = os.environ.get(DDP_TIMEOUT_VARIABLE, "600")
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= DDP_TIMEOUT_MAX_S:  # nan, inf, 0 and below, text
        raise SetupError(
            f"{DDP_TIMEOUT_VARIABLE}={text!r} is not a number of seconds in (0, {DDP_TIMEOUT_MAX_S}]; "
            "set it to one (e.g. 600) or unset it for 600"
        )
    return seconds


def check_trainer(trainer) -> str:
    """At the start of a run: refuse what this machine cannot do for the recipe's trainer
    section (float16 or fsdp where ``auto`` finds no GPU), naming the field, the value and
    what would work; and a collective timeout a data-parallel Lightning run cannot use.
    Returns the accelerator the run uses."""
    from zoo.recipe.capabilities import cpu_problems

    if trainer.framework == "lightning" and trainer.resolved_strategy() in ("ddp", "fsdp"):
        ddp_timeout_s()

    accelerator = resolve_accelerator(trainer.accelerator)
    if accelerator == "cpu":
        why = f"trainer.accelerator is {trainer.accelerator!r}"
        if trainer.accelerator == "auto":
            why += " and this machine has no GPU"
        problems = cpu_problems(trainer.precision, trainer.strategy, why)
        if problems:
            raise SetupError("; ".join(problems))
    return accelerator
