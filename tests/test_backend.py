"""The backend interface (zoo.backend) and the run plan (zoo.plan): every backend answers the
same calls, evaluation runs where and how the recipe says, a plan reads its data once, and a
run executed from a plan is the run ``zoo.train`` makes. Parametrised over the backends."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from conftest import FRAMEWORKS, RECIPE, max_diff, tiny
from safetensors.numpy import load_file

import zoo
import zoo.data
from zoo import registry
from zoo.backend import BACKENDS, Backend, backend_for, save_checkpoint
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import model_tensors
from zoo.hardware import SetupError, gpu_count
from zoo.plan import RunPlan, plan_run

DETERMINISTIC = ["trainer.deterministic=true", "trainer.max_epochs=1"]


@pytest.fixture(scope="module")
def checkpoint(trained_runs, tmp_path_factory):
    """A trained tiny checkpoint of the default recipe, shared by the evaluation tests (the
    session's one run of this recipe, tests/trained_runs.py: test_resume_finished resumes a copy)."""
    return trained_runs.train(
        RECIPE, "lightning", tiny(tmp_path_factory.getbasetemp(), "trainer.max_epochs=1")
    ).checkpoint


def test_every_framework_has_a_backend_of_its_name():
    assert set(BACKENDS) == set(FRAMEWORKS)
    for name in FRAMEWORKS:
        backend = backend_for(name)
        assert isinstance(backend, Backend) and backend.name == name
        assert backend_for(name) is backend  # one adapter per process
    assert backend_for("torch") is backend_for("lightning")
    suffixes = {backend_for(name).state_suffix for name in FRAMEWORKS}
    assert len(suffixes) == len(FRAMEWORKS)  # a state file says which backend wrote it
    with pytest.raises(ValueError, match="not one of: lightning"):
        backend_for("jax")


def test_choosing_a_backend_or_planning_imports_no_framework():
    code = (
        "import sys\nfrom zoo.backend import backend_for\nimport zoo.plan, zoo.api\n"
        f"for name in {FRAMEWORKS!r}:\n    backend_for(name)\n"
        "print('LOADED', [m for m in ('torch', 'tensorflow', 'keras', 'lightning') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED []" in out


def test_a_lightning_run_loads_no_tensorflow(tmp_path):
    """The laziness boundary (docs/layout.md) keeps the other framework out of a torch run."""
    code = (
        "import sys, zoo\n"
        f"zoo.train({str(RECIPE)!r}, 'lightning', {tiny(tmp_path, 'trainer.max_epochs=1')!r})\n"
        "print('LOADED', [m for m in ('tensorflow', 'keras') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LOADED []" in done.stdout


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_build_load_and_predict_agree_across_backends(framework, tmp_path):
    """A seeded build holds the same tensors in every backend; a checkpoint loads into each;
    ``predict`` takes canonical-layout inputs and gives the same logits everywhere."""
    recipe = zoo.load_recipe(RECIPE, tiny(tmp_path))
    family = registry.get_family(recipe.model.architecture)
    config = registry.resolve_config(recipe.model.architecture)
    backend = backend_for(framework)
    built = backend.build(family, config, seed=7)
    reference = backend_for("lightning").build(family, config, seed=7)
    for name, tensor in model_tensors(reference).items():
        assert np.array_equal(model_tensors(built)[name], tensor), name
    inputs = config.example_input(5, seed=1)
    logits = backend.predict(built, inputs, batch_size=2)  # batches of 2, 2, 1
    assert logits.shape == (5, config.num_classes)
    assert max_diff(logits, backend_for("lightning").predict(reference, inputs)) <= 1e-5
    path = save_checkpoint(built, tmp_path / "model.safetensors")
    loaded = backend.load(read_checkpoint(path))
    assert max_diff(backend.predict(loaded, inputs), logits) <= 1e-6


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_evaluate_reads_the_checkpoint_once_and_reports_the_training_metrics(
    framework, checkpoint, tmp_path, monkeypatch
):
    reads = []
    real = zoo.checkpoint.metadata.read_checkpoint
    monkeypatch.setattr(zoo.checkpoint.metadata, "read_checkpoint", lambda *a: reads.append(a) or real(*a))
    metrics = zoo.evaluate(checkpoint, RECIPE, framework, tiny(tmp_path))
    assert len(reads) == 1
    trained = read_checkpoint(checkpoint).json("metrics")
    assert metrics["test_accuracy"] == pytest.approx(trained["test_accuracy"], abs=1e-6)
    assert metrics["test_loss"] == pytest.approx(trained["test_loss"], rel=1e-4)


def test_lightning_evaluates_in_the_recipes_precision(checkpoint, tmp_path, monkeypatch):
    """bf16-mixed on the CPU: the Trainer that tests runs under bf16 autocast (it used to be a
    float32 CPU Trainer whatever the recipe said), and the metrics stay close to float32's."""
    import zoo.lightning.backend as lightning_backend

    built = []
    real = lightning_backend.evaluation_trainer
    monkeypatch.setattr(
        lightning_backend, "evaluation_trainer", lambda cfg: built.append(real(cfg)) or built[-1]
    )
    mixed = zoo.evaluate(checkpoint, RECIPE, "lightning", tiny(tmp_path, "trainer.precision=bf16-mixed"))
    (trainer,) = built
    assert trainer.precision == "bf16-mixed" and type(trainer.accelerator).__name__ == "CPUAccelerator"
    full = zoo.evaluate(checkpoint, RECIPE, "lightning", tiny(tmp_path))
    assert built[1].precision == "32-true"
    assert mixed["test_loss"] != full["test_loss"]  # bf16 products round: not the float32 numbers
    assert mixed["test_accuracy"] == pytest.approx(full["test_accuracy"], abs=0.03)


def test_evaluation_of_a_data_parallel_recipe_runs_on_one_device(tmp_path):
    from zoo.lightning.backend import evaluation_trainer

    recipe = zoo.load_recipe(RECIPE, tiny(tmp_path, "trainer.strategy=ddp", "trainer.devices=2"))
    trainer = evaluation_trainer(recipe.trainer)
    assert trainer.num_devices == 1 and trainer.world_size == 1
    assert recipe.trainer.devices == 2  # the recipe itself is left as it is


def test_keras_evaluates_in_the_recipes_precision(checkpoint, tmp_path, monkeypatch):
    import zoo.nn.keras.precision as keras_precision

    asked = []
    real = keras_precision.build_keras
    monkeypatch.setattr(
        keras_precision, "build_keras", lambda f, c, p, t=None: asked.append(p) or real(f, c, p, t)
    )
    mixed = zoo.evaluate(checkpoint, RECIPE, "keras", tiny(tmp_path, "trainer.precision=bf16-mixed"))
    assert asked == ["bf16-mixed"]
    full = zoo.evaluate(checkpoint, RECIPE, "keras", tiny(tmp_path))
    assert asked == ["bf16-mixed"]  # float32 evaluates the loaded twin as it is
    assert mixed["test_accuracy"] == pytest.approx(full["test_accuracy"], abs=0.03)


@pytest.mark.skipif(gpu_count() > 0, reason="needs a machine without a GPU")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_evaluate_refuses_a_gpu_recipe_on_a_machine_without_one(framework, checkpoint, tmp_path):
    """The recipe's accelerator is honoured: a GPU recipe is not quietly evaluated on the CPU."""
    with pytest.raises(SetupError, match="GPU"):
        zoo.evaluate(checkpoint, RECIPE, framework, tiny(tmp_path, "trainer.accelerator=gpu"))


def counting_loads(monkeypatch) -> list:
    calls = []
    real = zoo.data.load_dataset
    monkeypatch.setattr(zoo.data, "load_dataset", lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def test_a_plan_loads_its_data_once_and_is_frozen(tmp_path, monkeypatch):
    calls = counting_loads(monkeypatch)
    plan = plan_run(RECIPE, "keras", tiny(tmp_path))
    assert len(calls) == 1
    assert isinstance(plan, RunPlan) and plan.framework == "keras" and plan.init is None
    assert plan.recipe.model == plan.config and plan.config.num_classes == 10  # bound to the data
    assert plan.run.path.parent == tmp_path and (plan.run.path / "recipe.yaml").is_file()
    assert plan.folder == plan.run.path and plan.resume is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.framework = "lightning"


def test_a_fine_tune_plan_loads_its_data_once(checkpoint, tmp_path, monkeypatch):
    calls = counting_loads(monkeypatch)
    plan = plan_run(
        RECIPE, "lightning", tiny(tmp_path, f"init.from={checkpoint}", "init.freeze_backbone=true")
    )
    assert len(calls) == 1
    assert plan.init is not None and plan.init.source == checkpoint and plan.init.freeze_backbone
    assert plan.init.reinitialised == []  # same data: every tensor starts from the checkpoint


@pytest.mark.skipif(gpu_count() > 0, reason="needs a machine without a GPU")
def test_a_refused_plan_leaves_no_run_folder(tmp_path):
    # float16 where 'auto' finds no GPU: refused when the run starts, not when it is validated
    with pytest.raises(SetupError, match="16-mixed"):
        plan_run(RECIPE, "keras", tiny(tmp_path, "trainer.accelerator=auto", "trainer.precision=16-mixed"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_backend_running_a_plan_trains_what_zoo_train_trains(framework, tmp_path):
    """The API adds planning and export around ``backend.fit(plan)``, nothing else: the same
    tensors bit for bit and the same test metrics (deterministic kernels, one seed)."""
    trained = zoo.train(RECIPE, framework, tiny(tmp_path, *DETERMINISTIC, "export.run_name=api"))
    plan = plan_run(RECIPE, framework, tiny(tmp_path, *DETERMINISTIC, "export.run_name=plan"))
    model, metrics = backend_for(framework).fit(plan)
    exported = load_file(trained.checkpoint)
    tensors = model_tensors(model)
    assert exported.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert np.array_equal(exported[name], tensor), name
    assert metrics["test_accuracy"] == trained.metrics["test_accuracy"]
    assert metrics["test_loss"] == trained.metrics["test_loss"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_backend_checks_its_own_training_states(framework, tmp_path):
    from zoo.checkpoint.file import CheckpointError
    from zoo.checkpoint.state import state_path

    backend = backend_for(framework)
    damaged = state_path(tmp_path, 1, backend.state_suffix)
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match="not a usable training state"):
        backend.check_state(damaged)
    (other,) = {b.state_suffix for b in map(backend_for, FRAMEWORKS)} - {backend.state_suffix}
    with pytest.raises(CheckpointError, match=f"not a {framework} training state"):
        backend.check_state(state_path(tmp_path, 1, other))
