"""Run folders: where a training run writes its recipe, metrics, checkpoint and summary."""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.hardware import SetupError


def is_primary_process() -> bool:
    """Whether this process writes the run's files: rank 0 of Lightning/torchrun/SLURM or
    the chief of a TF_CONFIG cluster (every data-parallel process runs the same code)."""
    env = os.environ
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        if env.get(name, "0") != "0":
            return False
    if "TF_CONFIG" in env:
        task = json.loads(env["TF_CONFIG"]).get("task", {})
        return task.get("index", 0) == 0 and task.get("type", "worker") in ("worker", "chief")
    return True


TASK_METRICS = {"classification": ("accuracy",), "language_modeling": ("bpc",)}


def metric_columns(task: str) -> list[str]:
    """The per-epoch CSV columns: identical for both frameworks."""
    metrics = TASK_METRICS[task]
    return [
        "epoch", "step", "lr", "train_loss", *(f"train_{m}" for m in metrics),
        "val_loss", *(f"val_{m}" for m in metrics), "epoch_seconds",
    ]  # fmt: skip


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def create(cls, root: Path, name: str) -> RunDir:
        """A new folder ``root/name`` (``name-2``, ``-3``... if taken). ``name`` is one path
        component: a run never lands outside ``export.dir``. Two runs started in the same
        second each get their own folder: ``mkdir`` is the claim, not an ``exists`` check."""
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise SetupError(
                f"export.run_name {name!r} is not a folder name; give a plain name without '/' "
                "or '..' (run folders are created inside export.dir)"
            )
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise SetupError(f"export.dir {str(root)!r} is a file, not a folder; choose a folder") from None
        suffix = 1
        while True:
            path = root / (name if suffix == 1 else f"{name}-{suffix}")
            try:
                path.mkdir()
                return cls(path)
            except FileExistsError:
                suffix += 1

    @staticmethod
    def default_name(recipe_name: str, framework: str) -> str:
        return f"{recipe_name}-{framework}-{time.strftime('%Y%m%d-%H%M%S')}"

    @property
    def recipe(self) -> Path:
        return self.path / "recipe.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def checkpoint(self) -> Path:
        return self.path / "model.safetensors"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.summary.write_text(json.dumps(summary, indent=2) + "\n")


class MetricsLog:
    """Appends one row per epoch; every row is flushed, so a crash keeps what was done."""

    def __init__(self, path: Path, task: str, append: bool = False):
        self.path = path
        self.columns = metric_columns(task)
        if append and path.exists():
            return  # a resumed run continues its file
        with open(path, "w", newline="") as handle:
            csv.writer(handle).writerow(self.columns)

    def append(self, row: dict[str, Any]) -> None:
        values = [_format(row.get(c)) for c in self.columns]
        with open(self.path, "a", newline="") as handle:
            csv.writer(handle).writerow(values)


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_metrics(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


class NonFiniteLoss(RuntimeError):
    """Training stopped because the loss stopped being a number."""

    def __init__(self, value: float, step: int, last_finite: tuple[int, float] | None):
        before = (
            f"the last finite loss was {last_finite[1]:.6g} at step {last_finite[0]}"
            if last_finite
            else "no step had a finite loss"
        )
        super().__init__(
            f"the training loss became {value} at step {step}; {before}. Lower optimizer.lr, "
            "add schedule.warmup_steps, or use trainer.precision '32-true'."
        )
        self.step = step
