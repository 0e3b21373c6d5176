"""``trainer.num_threads`` left unset: the CPUs free on the machine (its affinity less the other
load), recorded in the run's states and summary, and kept by a resume. The readings are injected
here: no verdict depends on what else the machine is running."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from conftest import FRAMEWORKS, RECIPE, tiny

from zoo.hardware import THREADS_VARIABLE, SetupError, free_cpus, kernel_threads


@pytest.fixture
def machine(monkeypatch):
    """A machine of ``cpus`` CPUs (this process's affinity) whose 1-minute load is ``load``."""
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)

    def reads(cpus: int, load: float) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
        monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))

    return reads


@pytest.mark.parametrize(
    ("cpus", "load", "free"), [(8, 0.0, 8), (8, 0.3, 8), (8, 5.2, 3), (8, 7.6, 1), (8, 30.0, 1), (2, 1.1, 1)]
)
def test_the_free_cpus_are_the_affinity_less_the_load_rounded_at_least_one(machine, cpus, load, free):
    machine(cpus, load)
    assert free_cpus() == free


def test_without_a_load_average_every_cpu_is_free(machine, monkeypatch):
    machine(4, 0.0)

    def unavailable():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert free_cpus() == 4


def trainer(num_threads=None):
    return SimpleNamespace(num_threads=num_threads)


def test_the_recipe_then_the_recorded_count_then_the_variable_then_the_free_cpus(machine, monkeypatch):
    machine(8, 2.0)
    assert kernel_threads(trainer()) == 6
    assert kernel_threads(trainer(), processes=2) == 3  # Lightning ddp: two processes share the CPUs
    machine(2, 1.7)
    assert kernel_threads(trainer(), processes=4) == 1
    monkeypatch.setenv(THREADS_VARIABLE, "3")
    assert kernel_threads(trainer()) == 3
    assert kernel_threads(trainer(), recorded=5) == 5  # a resumed run's count wins over the variable
    assert kernel_threads(trainer(4), recorded=5) == 4  # and the recipe's over everything


@pytest.mark.parametrize("text", ["0", "two", "-1", ""])
def test_a_wrong_variable_is_named(monkeypatch, text):
    monkeypatch.setenv(THREADS_VARIABLE, text)
    with pytest.raises(SetupError, match=rf"ZOO_NUM_THREADS={text!r} is not a number of threads"):
        kernel_threads(trainer())


def test_a_wrong_variable_refuses_the_run_before_its_folder_exists(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from zoo.cli import main

    monkeypatch.setenv(THREADS_VARIABLE, "two")
    sets = [a for s in tiny(tmp_path / "runs") for a in ("--set", s)]
    refused = CliRunner().invoke(main, ["train", str(RECIPE), *sets])
    assert refused.exit_code == 2 and "ZOO_NUM_THREADS='two' is not a number of threads" in refused.output
    assert not (tmp_path / "runs").exists()
    with_recipe = CliRunner().invoke(main, ["validate", str(RECIPE), "--quiet", *sets])
    assert with_recipe.exit_code == 0  # validating a recipe reads no machine


@pytest.fixture
def torch_threads():
    """torch's thread count is the process's: put back what the rest of the suite runs with."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_lightning_run_takes_the_free_cpus(machine, torch_threads, tmp_path):
    import torch

    import zoo

    machine(3, 0.9)
    result = zoo.train(RECIPE, "lightning", tiny(tmp_path, "trainer.max_epochs=1"))
    assert result.metrics["num_threads"] == 2 and torch.get_num_threads() == 2
    machine(3, 0.9)
    explicit = zoo.train(RECIPE, "lightning", tiny(tmp_path, "trainer.max_epochs=1", "trainer.num_threads=1"))
    assert explicit.metrics["num_threads"] == 1 and torch.get_num_threads() == 1


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_resume_computes_with_the_count_its_states_recorded(framework, machine, torch_threads, tmp_path):
    """One thread chosen on a busy machine; resumed when it has two free, the run goes on with
    the one it was trained with (its states say so), as a bit-exact resume needs."""
    import yaml

    import zoo
    from zoo.checkpoint.state import latest_state

    machine(2, 1.2)
    first = zoo.train(RECIPE, framework, tiny(tmp_path, "trainer.max_epochs=1"))
    assert first.metrics["num_threads"] == 1
    recipe = first.run_dir / "recipe.yaml"
    longer = yaml.safe_load(recipe.read_text())
    longer["trainer"]["max_epochs"] = 2
    recipe.write_text(yaml.safe_dump(longer))
    machine(2, 0.0)
    assert kernel_threads(trainer()) == 2  # what a fresh run would take now
    resumed = zoo.resume(first.run_dir, force=True)
    assert resumed.metrics["num_threads"] == 1
    assert json.loads((first.run_dir / "summary.json").read_text())["metrics"]["num_threads"] == 1
    state = latest_state(first.run_dir)
    if framework == "keras":
        from zoo.keras.callbacks import saved_threads

        assert saved_threads(state) == 1
    else:
        import torch

        from zoo.lightning.callbacks import KernelThreads

        assert torch.load(state, weights_only=True)[KernelThreads.KEY] == 1
        assert torch.get_num_threads() == 1
