"""The session's shared trained runs (tests/trained_runs.py): a recipe is trained once whoever
asks (another worker included), what keys it is what zoo would train, and a test that writes a
shared run is caught. zoo.train is replaced by a stand-in that writes a run folder: what is
checked here is the cache, not training."""

from __future__ import annotations

import pytest
from conftest import RECIPE, tiny
from trained_runs import SharedRunChanged, TrainedRuns, copy_run

import zoo
from zoo.api import TrainResult


@pytest.fixture
def trainings(monkeypatch) -> list[tuple]:
    """Each zoo.train call the cache makes, which writes a run folder under its export.dir."""
    calls: list[tuple] = []

    def train(recipe, framework=None, overrides=()):
        calls.append((recipe, framework, tuple(overrides)))
        resolved = zoo.load_recipe(recipe, overrides)
        run_dir = resolved.export.dir / f"run-{len(calls)}"
        run_dir.mkdir(parents=True)
        (run_dir / "model.safetensors").write_bytes(b"weights")
        (run_dir / "metrics.csv").write_text("epoch\n1\n")
        return TrainResult(run_dir, run_dir / "model.safetensors", {"test_accuracy": 0.5}, "lightning")

    monkeypatch.setattr(zoo, "train", train)
    return calls


def test_a_recipe_is_trained_once_for_every_worker_wherever_each_asks_it_to_write(trainings, tmp_path):
    root = tmp_path / "trained-runs"
    first = TrainedRuns(root).train(RECIPE, "lightning", tiny(tmp_path / "a"))
    again = TrainedRuns(root).train(
        RECIPE, None, tiny(tmp_path / "b")
    )  # another worker; the recipe's framework
    assert len(trainings) == 1 and again == first
    assert first.run_dir.is_relative_to(root) and first.checkpoint.read_bytes() == b"weights"


def test_what_zoo_would_train_differently_is_another_run(trainings, tmp_path, monkeypatch):
    runs = TrainedRuns(tmp_path / "trained-runs")
    results = [
        runs.train(RECIPE, "lightning", tiny(tmp_path)),
        runs.train(RECIPE, "lightning", tiny(tmp_path, "trainer.max_epochs=3")),
        runs.train(RECIPE, "keras", tiny(tmp_path)),
    ]
    monkeypatch.setenv("ZOO_NUM_THREADS", "2")  # the environment a run reads is part of its key
    results.append(runs.train(RECIPE, "lightning", tiny(tmp_path)))
    assert len(trainings) == 4 and len({r.run_dir for r in results}) == 4


def test_a_test_that_writes_a_shared_run_is_caught_and_a_copy_is_its_own(trainings, tmp_path):
    runs = TrainedRuns(tmp_path / "trained-runs")
    shared = runs.train(RECIPE, "lightning", tiny(tmp_path))
    mine = copy_run(shared, tmp_path / "mine")
    (mine.run_dir / "metrics.csv").write_text("epoch\n1\n2\n")
    assert mine.checkpoint == mine.run_dir / "model.safetensors" and mine.checkpoint.is_file()
    runs.check_all()
    (shared.run_dir / "metrics.csv").chmod(0o644)
    (shared.run_dir / "metrics.csv").write_text("epoch\n1\n2\n")
    with pytest.raises(SharedRunChanged, match=r"metrics\.csv"):
        runs.train(RECIPE, "lightning", tiny(tmp_path))
