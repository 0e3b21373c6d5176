"""A run folder's mechanics: created without clashes, held by one process (a lock), its
recipe recorded at the start, its summary at the end, and checked before a resume."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.backend import backend_of_state
from zoo.checkpoint.state import step_of
from zoo.hardware import SetupError
from zoo.limits import read_json
from zoo.metrics_file import MetricsLog
from zoo.recipe.errors import RecipeError
from zoo.recipe.loader import load_recipe
from zoo.recipe.schema import anchored_paths, run_name_problem
from zoo.tracking import finish_mlflow

log = logging.getLogger("zoo")


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def create(cls, root: Path, name: str) -> RunDir:
        """A new folder ``root/name`` (``name-2``, ``-3``... if taken). ``name`` is one path
        component (the recipe schema's rule, zoo.recipe.schema.run_name_problem): a run never
        lands outside ``export.dir``. Two runs started in the same second each get their own
        folder: ``mkdir`` is the claim, not an ``exists`` check."""
        problem = run_name_problem(name)
        if problem:
            raise SetupError(problem)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise SetupError(_not_a_folder(root)) from None
        suffix = 1
        while True:
            path = root / (name if suffix == 1 else f"{name}-{suffix}")
            try:
                path.mkdir()
            except FileExistsError:
                suffix += 1
                continue
            run = cls(path)
            run.claim()
            return run

    def claim(self) -> None:
        """Hold the run folder for this process until it exits: an exclusive ``flock`` on
        ``.lock``, so a second ``zoo resume`` (or a resume while the run still trains) is refused
        instead of appending a second copy of every epoch. The kernel drops the lock when the
        holder dies, however it dies; re-claiming in the same process is a no-op."""
        key = str(self.path.resolve())
        if key in HELD_LOCKS:
            return
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise SetupError(
                f"{self.path} is in use by {holder}; wait for that run to end (or stop it), then resume"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"zoo process {os.getpid()} on {socket.gethostname()}".encode())
        HELD_LOCKS[key] = fd

    def write_recipe(self, recipe: dict[str, Any], text: str) -> None:
        """``recipe.yaml`` for people, and the same recipe as it was at the start, which resume
        compares the (possibly edited) ``recipe.yaml`` against."""
        self.recipe.write_text(text)
        (self.path / RECORDED_RECIPE).write_text(json.dumps(recipe, indent=1) + "\n")

    def recipe_changes(self, recipe: dict[str, Any]) -> list[str] | None:
        """Fields of ``recipe`` that differ from the recipe the run started with (None when
        the run predates the record)."""
        recorded = self.path / RECORDED_RECIPE
        if not recorded.is_file():
            return None
        fix = "it is the run's record of its starting recipe, damaged: delete it to resume without the check"
        found = read_json(recorded, error=SetupError, fix=fix)
        # A run recorded before recipes kept absolute paths: its relative ones, as zoo reads them now.
        found = anchored_paths(found) if isinstance(found, dict) else found
        # Read by today's schema, so a field added since the run started is its default, not a
        # change (trainer.label_smoothing, trainer.max_steps, trainer.metrics); a record it refuses is
        # compared as is.
        with contextlib.suppress(RecipeError):
            found = load_recipe(found).to_dict() if isinstance(found, dict) else found
        before, now = _flat(found), _flat(recipe)
        return [
            f"{key}: {before.get(key, '(unset)')!r} -> {now.get(key, '(unset)')!r}"
            for key in sorted(before.keys() | now.keys())
            # Where the curves go changes nothing the states were trained with.
            if before.get(key) != now.get(key) and not key.startswith("tracking.")
        ]

    @staticmethod
    def default_name(
        recipe_name: str, framework: str, model: str = "", source: str | Path | None = None
    ) -> str:
        """``<recipe>[-<model>][-from-<source>]-<framework>-<time>``: the model where the recipe's
        name does not already say it, and for a fine-tuning run what it started from (the source
        run's name without its framework and time, or the checkpoint's file name), so two runs of
        one recipe on different models, or from different checkpoints, read apart in ``zoo runs``
        and ``zoo plot``'s legend."""
        parts = [recipe_name]
        if model and model not in recipe_name:
            parts.append(model)
        if source is not None:
            parts.append(f"from-{_source_name(Path(source))}")
        return "-".join([*parts, framework, time.strftime("%Y%m%d-%H%M%S")])

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
        """The run's end record: ``status`` (``finished`` unless said otherwise) and what it
        reached. A run that logs to MLflow closes its MLflow run here, checkpoint included."""
        summary = {"status": "finished", **summary}
        self.summary.write_text(json.dumps(summary, indent=2) + "\n")
        finish_mlflow(self.path, summary)

    def read_summary(self) -> dict[str, Any]:
        try:
            return read_json(self.summary, error=ValueError)
        except (OSError, ValueError):
            return {}


RECORDED_RECIPE = ".recipe.json"
HELD_LOCKS: dict[str, int] = {}  # run folders this process holds the lock of: descriptor by path


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): node}


def prepare_resume(run: RunDir, state_file: Path, recipe: dict[str, Any], force: bool = False) -> None:
    """Everything that must hold before a run continues, checked before any training starts:
    the run is this process's alone, the state reads, the recipe is the one the states came
    from (or ``force``), a diverged run is not replayed into its divergence, and
    ``metrics.csv`` keeps no epoch the state has not reached (it is trained again)."""
    run.claim()
    backend_of_state(state_file).check_state(state_file)
    changes = run.recipe_changes(recipe)
    if changes is None:
        log.warning(f"{run.path} has no record of its starting recipe ({RECORDED_RECIPE}); not compared")
        changes = []
    summary = run.read_summary()
    if summary.get("status") == "diverged" and not (force and changes):
        raise SetupError(
            f"{run.path} diverged at step {summary.get('step')} (summary.json); resuming its last "
            f"state replays the same steps into the same divergence. Edit {run.recipe} (a lower "
            "optimizer.lr, schedule.warmup_steps) and run zoo resume --force, or train again"
        )
    if changes and not force:
        shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more" if len(changes) > 8 else "")
        raise SetupError(
            f"{run.recipe} was changed since the run started ({shown}); its states were trained with "
            "the recipe as it was. Undo the change, or run zoo resume --force to continue with it"
        )
    if changes:
        log.warning(f"resuming with a changed recipe (--force): {'; '.join(changes)}")
    if run.metrics.is_file():
        MetricsLog.keep_until(run.metrics, step_of(state_file))


def _not_a_folder(root: Path) -> str:
    """Why ``export.dir`` cannot hold runs, in the words of what is there: a dangling link
    reads as "a file" to ``mkdir``, which would send the user looking for a file that is not."""
    for part in (root, *root.parents):
        where = f"export.dir {str(root)!r}" + ("" if part == root else f": {str(part)!r}")
        if part.is_symlink() and not part.exists():
            target = os.readlink(part)
            missing = "which does not exist; create it or choose another folder"
            return f"{where} is a symbolic link to {target!r}, {missing}"
        if part.exists() and not part.is_dir():
            return f"{where} is a file, not a folder; choose a folder"
    return f"export.dir {str(root)!r} is not a folder; choose a folder"


# A default run name's tail: its framework, its time, and a clash suffix.
_RUN_TAIL = re.compile(r"-(lightning|keras)-\d{8}-\d{6}(-\d+)?$")
SOURCE_NAME_MAX = 48  # bytes of a source's name kept in a run's name (a folder name holds 255)


def _source_name(checkpoint: Path) -> str:
    """What a fine-tuning run started from, short: ``model.safetensors`` is named by its folder
    (a run, or an imported model's folder), and a run's name loses its framework and time."""
    name = (
        checkpoint.parent.name if checkpoint.stem == "model" and checkpoint.parent.name else checkpoint.stem
    )
    name = _RUN_TAIL.sub("", name) or name
    return os.fsencode(name)[:SOURCE_NAME_MAX].decode(errors="ignore").strip("-.") or "checkpoint"
