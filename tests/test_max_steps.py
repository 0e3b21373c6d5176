"""``trainer.max_steps``: how long a run trains, in optimizer steps, the same in both frameworks.

With gradient accumulation a step is an optimizer step. With ``max_epochs`` too the run stops at
whichever comes first (Lightning's rule); with ``max_steps`` alone it takes the epochs it needs, the
last one cut where the steps end (validated and logged as an epoch in both). The learning-rate
schedule spans the steps the run takes: the rates are torch's own ``CosineAnnealingLR`` over them.
The runs also smooth their labels and are evaluated later from the recipe their checkpoints record
(``zoo evaluate CKPT`` without ``--recipe``), against torch's ``cross_entropy(label_smoothing=)``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from cli_helpers import invoke, one_line_refusal, zoo_cli

import zoo
import zoo.api
from zoo.data import load_dataset
from zoo.hardware import SetupError
from zoo.metrics_file import read_metrics
from zoo.recipe import RecipeError, load_recipe
from zoo.schedule import epoch_spans, lr_table, run_length
from zoo.tracking import read_tensorboard

RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
STEPS = 13  # 1257 samples: 20 batches of 64 an epoch, 10 optimizer steps: the run ends 3 into epoch 2
SMOOTHING = 0.1
SETTINGS = [
    "model.architecture=convnet-tiny", "trainer.progress_bar=false", "data.batch_size=64",
    "trainer.accumulate_grad_batches=2", f"trainer.max_steps={STEPS}", "schedule.name=cosine",
    "schedule.warmup_steps=0", "optimizer.lr=0.01", "tracking.log_every_n_steps=1",
    f"trainer.label_smoothing={SMOOTHING}",
]  # fmt: skip


def trainer(**fields):
    return load_recipe({"model": {"architecture": "convnet-tiny"}, "trainer": fields}).trainer


def test_whichever_ends_first():
    assert run_length(trainer(), 10) == (10, 100)  # neither: 10 epochs
    assert run_length(trainer(max_steps=13), 10) == (2, 13)  # as many epochs as the steps need
    assert run_length(trainer(max_steps=13, max_epochs=1), 10) == (1, 10)  # the epochs end first
    assert run_length(trainer(max_steps=13, max_epochs=5), 10) == (5, 13)  # the steps end first
    assert run_length(trainer(max_epochs=3), 10) == (3, 30)
    with pytest.raises(SetupError, match="at most 10,000 epochs"):
        run_length(trainer(max_steps=20_000), 1)
    for bad in ({"max_steps": 0}, {"max_steps": 2.5}, {"max_steps": "7"}, {"max_epochs": 0}):
        with pytest.raises(RecipeError, match=r"trainer\.max_"):
            trainer(**bad)


def test_keras_epoch_spans_end_at_the_steps_end():
    # (start epoch, batches into it) -> the fit calls: (first epoch, end epoch, skip, batches)
    assert epoch_spans(0, 0, 20, 26) == [(0, 1, 0, 20), (1, 2, 0, 6)]
    assert epoch_spans(0, 0, 20, 40) == [(0, 2, 0, 20)]
    assert epoch_spans(0, 4, 20, 26) == [(0, 1, 4, 16), (1, 2, 0, 6)]  # resumed mid-epoch
    assert epoch_spans(1, 2, 20, 26) == [(1, 2, 2, 4)]  # resumed inside the cut epoch
    assert epoch_spans(1, 6, 20, 26) == []  # the cut epoch's end was saved: nothing left
    assert epoch_spans(2, 0, 20, 60) == [(2, 3, 0, 20)]


def test_a_cosine_spans_the_steps_the_run_takes():
    cosine = load_recipe({"model": {"architecture": "convnet-tiny"}, "schedule": {"name": "cosine"}}).schedule
    table = lr_table(cosine, 0.1, 10, 2, total=STEPS)
    assert len(table) == STEPS
    np.testing.assert_allclose(table, torch_cosine(0.1, STEPS)[:STEPS], rtol=1e-12)


def torch_cosine(lr: float, steps: int) -> list[float]:
    """torch's CosineAnnealingLR over ``steps``: the rate of each update, and of the one after the last."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    rates = []
    for _ in range(steps + 1):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return rates


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("max-steps")
    return {
        fw: zoo.train(RECIPE, fw, [*SETTINGS, f"export.dir={root / fw}"]) for fw in ("lightning", "keras")
    }


@pytest.mark.slow
def test_both_end_at_the_same_step_with_the_same_rates(runs):
    rates = torch_cosine(0.01, STEPS)
    rows = {}
    for framework, result in runs.items():
        events = read_tensorboard(result.run_dir / "tb")
        logged = events["optim/lr_step"]  # after each step, the rate of the next (the last one held)
        assert [s for s, _ in logged] == list(range(1, STEPS + 1)), framework
        expected = [rates[min(s, STEPS - 1)] for s, _ in logged]
        np.testing.assert_allclose([v for _, v in logged], expected, rtol=1e-6, err_msg=framework)
        rows[framework] = read_metrics(result.run_dir / "metrics.csv")
        # the cut epoch is an epoch: validated, its train metrics logged
        assert [(r["epoch"], r["step"]) for r in rows[framework]] == [("1", "10"), ("2", str(STEPS))]
    for a, b in zip(rows["lightning"], rows["keras"], strict=True):
        for column in ("train_loss", "val_loss", "val_accuracy"):
            assert float(a[column]) == pytest.approx(float(b[column]), rel=1e-4), column


@pytest.mark.slow
def test_evaluate_takes_the_recipe_the_checkpoint_records(runs, tmp_path):
    result = runs["lightning"]
    recipe = load_recipe(result.run_dir / "recipe.yaml")
    test = load_dataset(recipe.data, "image").test
    model = zoo.load_checkpoint(result.checkpoint, "lightning")
    with torch.no_grad():
        logits = model(torch.from_numpy(test.x))
    labels = torch.from_numpy(test.y).long()
    reference = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING).item()
    assert abs(reference - F.cross_entropy(logits, labels).item()) > 1e-3  # the smoothing shows
    # the run folder's recipe.yaml, in both frameworks
    for framework in ("lightning", "keras"):
        metrics = zoo.evaluate(result.run_dir, framework=framework)
        assert metrics["test_loss"] == pytest.approx(reference, rel=1e-5), framework
    # the file alone, away from its folder: the recipe in its metadata
    alone = shutil.copy(result.checkpoint, tmp_path / "alone.safetensors")
    status, out = zoo_cli("evaluate", alone, "--json", "--framework", "keras")
    assert status == 0 and '"test_loss"' in out
    assert zoo.evaluate(alone)["test_loss"] == pytest.approx(reference, rel=1e-5)


def test_evaluate_without_any_recipe_says_what_to_give(tmp_path):
    bare = zoo.save_checkpoint(zoo.create_model("convnet-tiny", seed=0), tmp_path / "bare.safetensors")
    one_line_refusal(invoke("evaluate", bare), "records no recipe", "--recipe")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_steps_raised_after_an_epoch_end_go_on_into_the_next_epoch(framework, tmp_path):
    """max_steps ending a run exactly at an epoch's end (max_epochs 30 in the recipe, not reached),
    then raised and resumed (--force): the next epoch, once (Lightning's own max_steps resumed
    into the ended epoch again)."""
    first = zoo.train(RECIPE, framework, [*SETTINGS, "trainer.max_steps=10", f"export.dir={tmp_path}"])
    assert [(r["epoch"], r["step"]) for r in first.history] == [("1", "10")]
    recipe = first.run_dir / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("max_steps: 10", "max_steps: 20"))
    longer = zoo.api.resume(first.run_dir, force=True)
    assert [(r["epoch"], r["step"]) for r in longer.history] == [("1", "10"), ("2", "20")]
