"""Trained runs shared by the whole test session: a recipe trained once per pytest run.

Many test files train the very same tiny recipe (conftest.tiny) to have a checkpoint or a run
folder to look at: loading, predicting, fine-tuning from, comparing, deploying. Training is most
of their time, so a run is trained once per test session and every test that asks for the same
recipe in the same framework gets that run. Both xdist workers share one cache folder, and a
lock per run makes the second worker wait for the first's training instead of doing it again.

A run is keyed by a hash of the recipe as zoo resolves it (zoo.load_recipe with the overrides,
its file paths made absolute), without ``export.dir`` (the cache sets it), and of the framework
and the environment variables that change how a run trains (ENVIRONMENT). Two requests share a
run only when zoo would train exactly the same thing for both.

The cached folders are read-only for tests: a test that modifies a run (resumes it, deletes or
edits its files) takes its own copy with :func:`copy_run`. Each run's files are recorded when it
is made and checked whenever it is handed out again and at the end of the session, so a test
that changed a shared run fails loudly, whether or not the file permissions stopped it (they do
not stop root).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"  # written last: a run folder without it was never finished
# The environment a run reads (threads, memory check, devices, a scheduler's launch), part of the
# key; not ZOO_RUN_DIR, which every run sets for the processes it launches, nor ZOO_CACHE (where
# foreign checkpoints are imported to, which tests point at their own tmp_path).
ENVIRONMENT = (
    "ZOO_NUM_THREADS", "ZOO_AVAILABLE_MEMORY", "ZOO_DDP_TIMEOUT_S", "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS", "TF_ENABLE_ONEDNN_OPTS", "TF_CONFIG", "KERAS_BACKEND", "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
)  # fmt: skip


class SharedRunChanged(AssertionError):
    """A test wrote into a run other tests share (it should have taken :func:`copy_run`)."""


def session_folder(tmp_path_factory) -> Path:
    """The folder every worker of this pytest run sees: the base temp's parent under xdist
    (``pytest-N/`` above each worker's ``popen-gwK/``), the base temp itself without it."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "trained-runs"


def recipe_key(
    recipe: Any, framework: str | None = None, overrides: list[str] | tuple = ()
) -> tuple[str, Any]:
    """(hash, resolved recipe) of a request: what zoo would train for it, less where it writes."""
    import zoo
    from zoo.backend import framework_name
    from zoo.recipe import Recipe

    resolved = recipe if isinstance(recipe, Recipe) else zoo.load_recipe(recipe, list(overrides))
    fields = resolved.to_dict()
    fields["export"].pop("dir", None)
    environment = {k: v for k, v in sorted(os.environ.items()) if k in ENVIRONMENT or k.startswith("SLURM_")}
    keyed = {
        "recipe": fields,
        "framework": framework_name(framework or resolved.trainer.framework),
        "environment": environment,
    }
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:20], resolved


def _request(recipe: Any, overrides: list[str] | tuple, export_dir: Path) -> tuple[Any, list[str]]:
    """(recipe, overrides) for zoo.train: the test's own, writing under ``export_dir``. A Recipe
    object goes as the fields it was given (zoo.plan re-validates it so for another framework)."""
    from zoo.recipe import Recipe
    from zoo.recipe.schema import anchored_paths

    if isinstance(recipe, Recipe):
        recipe, overrides = (
            anchored_paths(recipe.model_dump(mode="json", by_alias=True, exclude_unset=True)),
            (),
        )
    return recipe, [*overrides, f"export.dir={export_dir}"]


def fingerprint(folder: Path) -> dict[str, list[int]]:
    """Each file under ``folder`` with its size and modification time: what must not change."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(folder))] = [info.st_size, info.st_mtime_ns, stat.S_IFMT(info.st_mode)]
    return found


@dataclass
class TrainedRuns:
    """The session's cache of trained runs, rooted at a folder all workers share."""

    root: Path
    _results: dict[str, Any] = field(default_factory=dict)  # this worker's hand-outs, by key

    def train(self, recipe: Any, framework: str | None = None, overrides: list[str] | tuple = ()):
        """The zoo.api.TrainResult of ``zoo.train(recipe, framework, overrides)``, trained once a
        session: the first request trains it (in this process), the others read its result. Its
        run folder belongs to every test that asks: read it, never write it (see copy_run)."""
        key, _ = recipe_key(recipe, framework, overrides)
        if key in self._results:
            self._check(key)
            return self._results[key]
        folder = self.root / key
        with self._lock(key):
            result_file = folder / RESULT_FILE
            if not result_file.is_file():
                result = self._train(folder, _request(recipe, overrides, folder / "runs"), framework)
            else:
                result = _read_result(result_file)
        self._results[key] = result
        self._check(key)
        return result

    def check_all(self) -> None:
        """Fail if a test changed any run this worker handed out (called at the session's end)."""
        for key in self._results:
            self._check(key)

    def _train(self, folder: Path, request: tuple[Any, list[str]], framework: str | None):
        import zoo

        if folder.exists():  # a training that failed or was interrupted: start again
            shutil.rmtree(folder, onerror=_make_writable_and_retry)
        folder.mkdir(parents=True)
        recipe, overrides = request
        result = zoo.train(recipe, framework, overrides)
        _release(result.run_dir)
        _make_read_only(folder / "runs")
        record = {
            "run_dir": str(result.run_dir), "checkpoint": str(result.checkpoint),
            "metrics": result.metrics, "framework": result.framework, "history": result.history,
            "already_finished": result.already_finished, "files": fingerprint(folder / "runs"),
        }  # fmt: skip
        partial = folder / (RESULT_FILE + ".partial")
        partial.write_text(json.dumps(record))
        partial.replace(folder / RESULT_FILE)
        return result

    def _check(self, key: str) -> None:
        folder = self.root / key
        recorded = json.loads((folder / RESULT_FILE).read_text())["files"]
        now = fingerprint(folder / "runs")
        if now != recorded:
            changed = sorted(set(now) ^ set(recorded) | {k for k in now if now[k] != recorded.get(k)})
            raise SharedRunChanged(
                f"a test changed the shared run {folder}; a test that writes a run takes its own "
                f"copy (tests/trained_runs.copy_run). Changed: {changed[:5]}"
            )

    @contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        """Held while a run is trained or read: the other worker waits for the first one's run."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _read_result(path: Path):
    from zoo.api import TrainResult

    record = json.loads(path.read_text())
    return TrainResult(
        Path(record["run_dir"]), Path(record["checkpoint"]), record["metrics"], record["framework"],
        record["history"], already_finished=record["already_finished"],
    )  # fmt: skip


def copy_run(result, destination: Path):
    """A private, writable copy of a shared run under ``destination`` (for a test that resumes,
    edits or deletes it), as the TrainResult of the copy: its run_dir and checkpoint moved there.
    The files are copied as they are: what they record of the original folder (summary.json's
    checkpoint, recipe.yaml's export.dir) still names it, as after a user's ``cp -r``."""
    destination.mkdir(parents=True, exist_ok=True)
    target = destination / result.run_dir.name
    shutil.copytree(result.run_dir, target, symlinks=True)
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    checkpoint = target / result.checkpoint.relative_to(result.run_dir)
    return replace(result, run_dir=target, checkpoint=checkpoint)


def _release(run_dir: Path) -> None:
    """Let go of the run's lock, which zoo holds until the process that trained it exits: a
    cached run is a finished run whose process has ended, the same in every worker (another
    worker would otherwise see it held, "running", and this one would not)."""
    from zoo.runs.folder import HELD_LOCKS

    fd = HELD_LOCKS.pop(str(run_dir.resolve()), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor drops its flock


def _make_read_only(folder: Path) -> None:
    """Files and folders without write permission: a test that writes a shared run fails at the
    write (where permissions apply; root is caught by the fingerprint check instead)."""
    for path in sorted(folder.rglob("*"), reverse=True):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    folder.chmod(folder.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _make_writable_and_retry(function, path, _info) -> None:
    os.chmod(os.path.dirname(path), stat.S_IRWXU)
    if os.path.exists(path) and not os.path.islink(path):
        os.chmod(path, stat.S_IRWXU)
    function(path)
