"""What this machine has, found without importing a framework (validation must stay fast)."""

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
