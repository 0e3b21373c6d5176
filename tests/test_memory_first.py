"""Memory first: train, finetune, evaluate and import estimate their peak (zoo.peak_memory) and
refuse, before anything is built or written, a job the machine has no memory for; a job that
fits runs as before. The compare refusals are in test_compare_checkpoint.py."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from compare_cases import RECIPE, quick

from zoo import model_memory, peak_memory
from zoo.cli import main

TINY = "convnet-tiny"
SHORT = "50MB"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run that fits the 4 GB it is told it has: a normal run is not refused."""
    import zoo

    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(peak_memory.AVAILABLE_VARIABLE, "4GB")
        result = zoo.train(RECIPE, overrides=[*quick(TINY, root), "data.train_per_class=8"])
    return result.run_dir


def sets(overrides: list[str]) -> list[str]:
    return [word for override in overrides for word in ("--set", override)]


def refused(args: list[str], job: str) -> str:
    outcome = CliRunner().invoke(main, args)
    assert outcome.exit_code == 2, outcome.output
    message = outcome.output
    assert f"{job} needs about" in message and "has 0.0 GB available" in message, message
    assert "Nothing was built" in message and peak_memory.AVAILABLE_VARIABLE in message
    return message


def test_a_run_that_fits_is_not_refused(trained):
    assert (trained / "model.safetensors").is_file()


def test_a_run_that_does_not_fit_is_refused_before_its_folder_exists(monkeypatch, tmp_path):
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, SHORT)
    refused(["train", str(RECIPE), *sets(quick(TINY, tmp_path))], "zoo train")
    assert not list(tmp_path.iterdir())


def test_a_fine_tune_that_does_not_fit_is_refused(monkeypatch, tmp_path, trained):
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, SHORT)
    args = [
        "finetune",
        str(RECIPE),
        "--from",
        str(trained / "model.safetensors"),
        *sets(quick(TINY, tmp_path)),
    ]
    message = refused(args, "zoo train")
    assert ", checkpoint 0.0 GB," in message  # the fine-tune's start is counted
    assert not list(tmp_path.iterdir())


def planned(tmp_path, *extra: str, architecture: str = TINY):
    """The recipe (its model bound to the data), family, config and dataset of a run of the
    tiny CNN (or ``architecture``), as zoo.plan makes them."""
    import zoo
    from zoo.plan import _fresh_start
    from zoo.recipe import load_recipe

    recipe = load_recipe(RECIPE, [*quick(architecture, tmp_path), *extra])
    family = zoo.registry.get_family(architecture)
    dataset, config, _ = _fresh_start(recipe, family)
    return recipe.model_copy(update={"model": config}), family, config, dataset


def estimator(tmp_path, *extra: str, architecture: str = TINY):
    """zoo train's estimate of that run at a batch size and an evaluation batch size (the
    recipe's by default)."""
    recipe, family, config, dataset = planned(tmp_path, *extra, architecture=architecture)
    at = peak_memory.training_estimator(recipe, family, config, dataset, fine_tune=False)
    return lambda batch, eval_batch=recipe.data.eval_batch_size: at(batch, eval_batch)


def test_the_refusal_names_a_batch_size_that_fits(monkeypatch, tmp_path):
    """Between the estimates at batch 8 and at the recipe's 16, batch 8 is offered, and fits."""
    import zoo

    small_eval = "data.eval_batch_size=8"  # so that the training batch's activations are the peak
    estimate = estimator(tmp_path, small_eval)
    assert estimate(8).total < estimate(16).total  # activations grow with the batch
    assert estimate(16).parts["activations"] > 0
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, str((estimate(8).total + estimate(16).total) // 2))
    with pytest.raises(peak_memory.MemoryShort, match=r"--set data\.batch_size=8\b") as error:
        zoo.train(RECIPE, overrides=[*quick(TINY, tmp_path), small_eval])
    assert peak_memory.gib(estimate(16).total) in str(error.value)
    assert not list(tmp_path.iterdir())


def test_the_evaluation_batch_is_counted_and_a_smaller_one_offered(monkeypatch, tmp_path):
    """Validation and test run at data.eval_batch_size (512): where that pass is the peak, the
    refusal offers a smaller evaluation batch."""
    import zoo

    estimate = estimator(tmp_path)
    wanted = estimate(16)
    assert wanted.parts["evaluation batch"] > wanted.parts["activations"] == 0
    smaller = estimate(16, 64).total
    assert smaller < wanted.total
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, str((smaller + wanted.total) // 2))
    with pytest.raises(peak_memory.MemoryShort, match=r"--set data\.eval_batch_size=\d+\b"):
        zoo.train(RECIPE, overrides=quick(TINY, tmp_path))
    assert not list(tmp_path.iterdir())


def test_gradient_checkpointing_is_counted_and_offered_where_it_fits(monkeypatch, tmp_path):
    """With trainer.gradient_checkpointing a pass keeps each residual block's inputs and one
    block's recompute: the estimate counts that, and a run that fits only that way is offered
    it, and then runs."""
    import zoo

    resnet, shape = "resnet-8", ["data.batch_size=64", "data.eval_batch_size=8"]  # the pass is the peak
    plain = estimator(tmp_path, *shape, architecture=resnet)(64)
    recomputed = estimator(tmp_path, *shape, "trainer.gradient_checkpointing=true", architecture=resnet)(64)
    assert 0 < recomputed.parts["activations"] < 0.8 * plain.parts["activations"]
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, str((plain.total + recomputed.total) // 2))
    overrides = [*quick(resnet, tmp_path), *shape]
    with pytest.raises(peak_memory.MemoryShort, match=r"--set trainer\.gradient_checkpointing=true \(about"):
        zoo.train(RECIPE, overrides=overrides)
    assert not list(tmp_path.iterdir())
    result = zoo.train(RECIPE, overrides=[*overrides, "trainer.gradient_checkpointing=true"])
    assert result.checkpoint.is_file()


def test_a_saved_state_is_counted(tmp_path):
    """A training state is written from a copy of the weights and the optimizer's moments while
    the allocator still holds what the last step's pass freed: with tiny batches that, not the
    pass, is the peak."""
    _, family, config, dataset = planned(tmp_path)
    estimate = estimator(tmp_path, "data.eval_batch_size=1")(1)
    weights = estimate.parts["weights and gradients"] // 2
    step = model_memory.activation_bytes(family, config, dataset.train.x[:1])
    assert 0 < step < weights
    assert estimate.parts["saved state"] == 3 * weights + step  # the weights and Adam's two moments
    assert estimate.parts["activations"] == estimate.parts["evaluation batch"] == 0


def test_an_evaluation_that_does_not_fit_is_refused(monkeypatch, trained):
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, SHORT)
    refused(["evaluate", str(trained / "model.safetensors"), "--recipe", str(trained / "recipe.yaml")],
            "zoo evaluate")  # fmt: skip


def test_an_import_that_does_not_fit_is_refused_before_reading(monkeypatch, tmp_path):
    from safetensors.numpy import save_file

    source = tmp_path / "weights.safetensors"
    save_file({"fc.weight": np.zeros((512, 1024), np.float32)}, str(source))  # 2 MB
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, "4MB")  # three copies of it do not fit
    out = tmp_path / "imported"
    outcome = CliRunner().invoke(main, ["import", str(source), "--out", str(out)])
    assert outcome.exit_code == 2, outcome.output
    assert "zoo import needs about" in outcome.output and "Nothing was built" in outcome.output
    assert not out.exists()
