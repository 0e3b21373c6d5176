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

from zoo.recipe.capabilities import cpu_problems


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


THREADS_VARIABLE = "ZOO_NUM_THREADS"


def free_cpus() -> int:
    """The CPUs free for this process's kernels: those it may run on (its affinity: a container's,
    a cgroup's or ``taskset``'s share, else every core) less the other load on the machine (the
    1-minute load average, the runnable threads of every process), rounded, at least 1.

    Kernels that take every core on a machine whose cores are busy do not share them: their
    threads wait on each other at every parallel region, and a small model's Lightning step ran
    8-18x (Keras 1.7-3.4x) slower than on the one core the rule left it (bench/threads_under_load.py).
    zoo's own start (imports, reading the data) adds a few tenths to the load average by then,
    which the rounding absorbs."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system: the CPUs are all there is
        load = 0.0
    return max(1, round(cpus - load))


def kernel_threads(trainer, recorded: int | None = None, processes: int = 1) -> int:
    """The CPU threads a run's kernels use. ``trainer.num_threads`` where the recipe sets it;
    else ``recorded``, the count a resumed run's state was trained with (a float sum's order
    follows the thread count, so a resume with another would not be bit-exact); else
    ``$ZOO_NUM_THREADS``; else this machine's :func:`free_cpus`, shared by the ``processes``
    the run starts on it (Lightning's ddp/fsdp: one per device), at least 1 each."""
    if trainer.num_threads:
        return trainer.num_threads
    if recorded:
        return int(recorded)
    return threads_variable() or max(1, free_cpus() // max(1, processes))


def threads_variable() -> int | None:
    """``$ZOO_NUM_THREADS``: the kernel threads of a run whose recipe leaves them unset, or None."""
    text = os.environ.get(THREADS_VARIABLE)
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise SetupError(
            f"{THREADS_VARIABLE}={text!r} is not a number of threads; set it to a whole number "
            "of at least 1, or unset it to use the CPUs free on this machine"
        )
    return int(text)


def check_trainer(trainer) -> str:
    """At the start of a run: refuse what this machine cannot do for the recipe's trainer
    section (float16 or fsdp where ``auto`` finds no GPU), naming the field, the value and
    what would work; and a collective timeout or a thread count (the environment's) the run
    cannot use. Returns the accelerator the run uses."""
    if trainer.framework == "lightning" and trainer.resolved_strategy() in ("ddp", "fsdp"):
        ddp_timeout_s()
    if not trainer.num_threads:
        threads_variable()

    accelerator = resolve_accelerator(trainer.accelerator)
    if accelerator == "cpu":
        why = f"trainer.accelerator is {trainer.accelerator!r}"
        if trainer.accelerator == "auto":
            why += " and this machine has no GPU"
        problems = cpu_problems(trainer.precision, trainer.strategy, why)
        if problems:
            raise SetupError("; ".join(problems))
    return accelerator
