"""Finding runs again (``zoo runs``, ``zoo runs show``): each run folder read as it is on
disk, without importing a framework, with its status, best metric and the commands that take it
further."""

from __future__ import annotations

import csv
import fcntl
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from zoo.checkpoint.state import latest_state
from zoo.hardware import SetupError
from zoo.limits import read_json, require_regular_file
from zoo.metrics_file import read_metrics
from zoo.recipe.overrides import read_yaml
from zoo.runs.folder import HELD_LOCKS, RECORDED_RECIPE

RUN_FILES = ("recipe.yaml", RECORDED_RECIPE, "summary.json", "metrics.csv", "state")
BEST = {"loss": min, "bpc": min, "bpt": min, "accuracy": max}  # which way each validation metric improves
STATUSES = ("finished", "interrupted", "diverged", "running", "damaged")


class _NotAFile(Exception):
    """recipe.yaml is a FIFO, a device or a socket: never opened (reading one blocks)."""


ADAPTER = "adapter.safetensors"  # what a LoRA run (init.lora) exports instead of model.safetensors


@dataclass(frozen=True)
class RunInfo:
    """What ``zoo runs`` shows of one run folder, read without importing a framework."""

    path: Path
    status: str  # one of STATUSES
    recipe: str | None = None
    framework: str | None = None
    architecture: str | None = None
    task: str | None = None
    epochs: int = 0
    best: tuple[str, float, int] | None = None  # (val metric, its best value, the epoch it came at)
    seconds: float | None = None
    checkpoint: Path | None = None
    problems: tuple[str, ...] = ()  # why a damaged run is damaged
    adapter: bool = False  # the run trained a LoRA adapter: its checkpoint is the adapter alone

    def to_dict(self) -> dict[str, Any]:
        best = None
        if self.best:
            best = {"metric": self.best[0], "value": self.best[1], "epoch": self.best[2]}
        return {
            "run": self.path.name, "path": str(self.path), "status": self.status, "recipe": self.recipe,
            "framework": self.framework, "architecture": self.architecture, "task": self.task,
            "epochs": self.epochs, "best": best, "seconds": self.seconds,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None, "problems": list(self.problems),
            "adapter": self.adapter,
        }  # fmt: skip


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in RUN_FILES)


def find_runs(root: Path) -> list[RunInfo]:
    """Every run folder directly under ``root`` (an export directory), oldest first."""
    if not root.is_dir():
        raise SetupError(f"{root} is not a folder; give the export directory (export.dir) with --dir")
    folders = [p for p in root.iterdir() if is_run_folder(p)]
    return [read_run(p) for p in sorted(folders, key=lambda p: (p.stat().st_mtime, p.name))]


def read_run(path: Path) -> RunInfo:
    """One run folder as it is on disk. Nothing in a damaged folder raises: what cannot be
    read is named in ``problems`` and the run is listed as damaged."""
    problems: list[str] = []
    recipe: dict[str, Any] = {}
    try:
        require_regular_file(path / "recipe.yaml", _NotAFile)
        found = read_yaml((path / "recipe.yaml").read_text())
        if isinstance(found, dict):
            recipe = found
        else:
            problems.append("recipe.yaml is not a recipe")
    except FileNotFoundError:
        problems.append("no recipe.yaml")
    except _NotAFile as error:
        problems.append(str(error))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as error:
        problems.append(f"recipe.yaml does not read ({type(error).__name__})")
    summary: dict[str, Any] = {}
    if (path / "summary.json").exists():
        try:
            summary = read_json(path / "summary.json", error=ValueError)
        except ValueError as error:  # named as the folder's file: the run's path heads the listing
            problems.append(str(error).replace(str(path / "summary.json"), "summary.json"))
        except OSError:
            problems.append("summary.json does not read")
    rows: list[dict[str, str]] = []
    if (path / "metrics.csv").exists():
        try:
            rows = read_metrics(path / "metrics.csv")
        except (OSError, csv.Error, UnicodeDecodeError):
            problems.append("metrics.csv does not read")
    model = recipe.get("model") if isinstance(recipe.get("model"), dict) else {}
    data = recipe.get("data") if isinstance(recipe.get("data"), dict) else {}
    trainer = recipe.get("trainer") if isinstance(recipe.get("trainer"), dict) else {}
    architecture = summary.get("preset") or summary.get("architecture") or model.get("preset")
    architecture = architecture or model.get("architecture")
    task = data.get("task", "language_modeling") if data.get("name") == "text" else "classification"
    if "task" in model:
        task = model["task"]
    init = recipe.get("init") if isinstance(recipe.get("init"), dict) else {}
    adapter = init.get("lora") is not None or _exported_name(summary) == ADAPTER
    checkpoint = path / (ADAPTER if adapter else "model.safetensors")
    status = _status(path, summary, checkpoint, problems)
    seconds = summary.get("total_seconds")
    if seconds is None and rows:
        seconds = sum(_number(r.get("epoch_seconds")) or 0.0 for r in rows) or None
    return RunInfo(
        path=path, status=status, recipe=summary.get("recipe") or recipe.get("name"),
        framework=summary.get("framework") or trainer.get("framework"), architecture=architecture,
        task=task, epochs=len(rows), best=best_metric(rows), seconds=seconds,
        checkpoint=checkpoint if checkpoint.is_file() else None, problems=tuple(problems), adapter=adapter,
    )  # fmt: skip


def _exported_name(summary: dict[str, Any]) -> str | None:
    """The file name of the checkpoint a finished run's summary names (``model.safetensors``, or
    ``adapter.safetensors`` for a LoRA run), None where it names none."""
    found = summary.get("checkpoint")
    return Path(found).name if isinstance(found, str) and found else None


def _status(path: Path, summary: dict[str, Any], checkpoint: Path, problems: list[str]) -> str:
    if summary.get("status") == "diverged":
        return "diverged"
    if _held(path):
        return "running"
    if summary.get("status", "finished") == "finished" and "metrics" in summary:
        if checkpoint.is_file():
            return "damaged" if problems else "finished"
        problems.append(f"summary.json says finished but {checkpoint.name} is missing")
        return "damaged"
    return "damaged" if problems else "interrupted"


def _held(path: Path) -> bool:
    """Whether a live process holds the run folder's lock (a run training right now)."""
    lock = path / ".lock"
    if not lock.is_file() or str(path.resolve()) in HELD_LOCKS:
        return False
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def best_metric(rows: list[dict[str, str]]) -> tuple[str, float, int] | None:
    """The best validation value of the task's metric (accuracy up, bpc and bpt down; loss where the
    run has nothing else), and the epoch it came at."""
    if not rows:
        return None
    columns = [c for c in rows[0] if c.startswith("val_") and c != "val_loss"] + ["val_loss"]
    for column in columns:
        direction = BEST.get(column.removeprefix("val_"), min)
        values = [(v, i + 1) for i, r in enumerate(rows) if (v := _number(r.get(column))) is not None]
        if values:
            value, epoch = direction(values, key=lambda pair: pair[0])
            return column, value, epoch
    return None


def resolve_run(name: str | Path, root: Path) -> Path:
    """A run given as a path, or as a folder name under ``root``."""
    path = Path(name)
    if is_run_folder(path):
        return path
    if is_run_folder(root / name):
        return root / name
    raise SetupError(
        f"{name} is not a run folder (nor a run under {root}); `zoo runs --dir {root}` lists them"
    )


def next_commands(info: RunInfo) -> dict[str, str]:
    """The commands that take a run further: resume it, evaluate, sample or fine-tune its
    checkpoint (a LoRA run's adapter: merged into its base first), plot it, open its TensorBoard;
    only those that apply to its state. Paths are absolute and quoted for a shell, so each
    command works from any directory (the run's recipe keeps absolute data paths too)."""
    run = Path(os.path.abspath(info.path))
    recipe, q = run / "recipe.yaml", _quoted
    framework = f" --framework {info.framework}" if info.framework else ""
    commands: dict[str, str] = {}
    if info.status == "interrupted" and latest_state(run) is not None:
        commands["resume"] = f"zoo resume {q(run)}"
    elif info.status == "diverged":
        commands["resume"] = (
            f"edit {q(recipe)} (a lower optimizer.lr, schedule.warmup_steps), then "
            f"zoo resume {q(run)} --force"
        )
    if info.checkpoint is not None:
        checkpoint = run / info.checkpoint.name
        commands["evaluate"] = f"zoo evaluate {q(checkpoint)} --recipe {q(recipe)}{framework}"
        if info.task == "language_modeling":
            commands["sample"] = f"zoo sample {q(checkpoint)} --prompt 'The ' --length 200{framework}"
        if info.adapter:  # fine-tuning starts from a whole model: the adapter folded into its base
            merged = run / "merged.safetensors"
            commands["merge"] = f"zoo merge {q(checkpoint)} -o {q(merged)}"
            checkpoint = merged
        commands["finetune"] = f"zoo finetune RECIPE --from {q(checkpoint)}"
    if info.epochs:
        commands["plot"] = f"zoo plot {q(run)} -o {q(run / 'curves.png')}"
    if (run / "tb").is_dir():
        commands["tensorboard"] = f"tensorboard --logdir {q(run / 'tb')}"
    return commands


def _quoted(path: Path) -> str:
    return shlex.quote(str(path))
