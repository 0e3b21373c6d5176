"""``zoo resume`` of a run that already finished says so and leaves every file of its folder as
it was, bytes and modification times, its lock included; an edited recipe still goes through
the resume checks (and ``--force`` trains it on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_zoo
from conftest import RECIPE, tiny
from trained_runs import copy_run


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every file and folder under ``folder``: its bytes (None for a folder) and mtime in ns."""
    found = {}
    for path in sorted([folder, *folder.rglob("*")]):
        content = path.read_bytes() if path.is_file() else None
        found[str(path.relative_to(folder))] = (content, path.stat().st_mtime_ns)
    return found


def zoo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return warm_zoo.run(
        [sys.executable, "-m", "zoo.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def finished_run(trained_runs, tmp_path_factory) -> Path:
    """A finished one-epoch run whose process has let go of it, as after a user's earlier ``zoo
    train`` (a process holds its run's lock until it exits): a private copy of the session's one
    run of this recipe (tests/trained_runs.py, which releases the lock; test_backend evaluates it),
    so that the resumes here can only change a folder of this module's."""
    root = tmp_path_factory.mktemp("runs")
    shared = trained_runs.train(RECIPE, None, tiny(root, "trainer.max_epochs=1"))
    return copy_run(shared, root).run_dir


def test_resume_of_a_finished_run_says_so_and_changes_no_file(finished_run):
    before = snapshot(finished_run)
    summary = json.loads((finished_run / "summary.json").read_text())

    done = zoo("resume", str(finished_run))

    assert done.returncode == 0, done.stderr
    assert snapshot(finished_run) == before
    assert "finished already" in done.stdout and "nothing changed" in done.stdout
    assert "raise trainer.max_epochs" in done.stderr  # how to train it longer, on stderr
    # The metrics reported are the run's own, not a re-test with a 0-second "training".
    assert f"test_accuracy {summary['metrics']['test_accuracy']:.4f}" in done.stdout

    scripted = zoo("resume", str(finished_run), "--json")
    assert scripted.returncode == 0, scripted.stderr
    document = json.loads(scripted.stdout)
    assert document["already_finished"] is True
    assert document["metrics"] == summary["metrics"]
    assert document["checkpoint"] == str(finished_run / "model.safetensors")
    assert snapshot(finished_run) == before


def test_an_edited_recipe_of_a_finished_run_is_resumed_with_force(finished_run, tmp_path):
    import shutil

    run = tmp_path / "longer"
    shutil.copytree(finished_run, run)
    recipe = run / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("max_epochs: 1", "max_epochs: 2"))

    refused = zoo("resume", str(run))
    assert refused.returncode == 2
    assert "trainer.max_epochs: 1 -> 2" in refused.stderr and "--force" in refused.stderr

    from zoo.api import resume

    result = resume(run, force=True)
    assert not result.already_finished
    assert [row["epoch"] for row in result.history] == ["1", "2"]
    assert json.loads((run / "summary.json").read_text())["metrics"] == result.metrics
