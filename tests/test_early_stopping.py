"""``trainer.early_stopping``: one decision in both frameworks, the best epoch exported beside the last.

zoo's rule (zoo.early_stopping) is checked against the libraries' own callbacks, Lightning's
``EarlyStopping`` and Keras' ``EarlyStopping``, fed the same epoch values: the same stop epoch and
the same best epoch. Then real runs in both frameworks: they stop at the same epoch, export the
same epoch as ``model.best.safetensors`` (bit for bit the weights that epoch ended with), record
both checkpoints in summary.json, and a run interrupted while it waits (resumed twice) decides as
the uninterrupted one.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from cli_helpers import invoke
from conftest import RECIPE, tiny
from safetensors.numpy import load_file

import zoo
import zoo.api
from zoo.early_stopping import EarlyStopping, monitor_mode
from zoo.hardware import SetupError
from zoo.recipe import RecipeError, load_recipe

# (values, mode, patience, min_delta): improvements, ties, min_delta-sized steps, late bests
SEQUENCES = [
    ([1.0, 0.9, 0.95, 0.96, 0.97, 0.5], "min", 3, 0.0),
    ([1.0, 0.9, 0.95, 0.85, 0.97, 0.99, 0.98], "min", 2, 0.0),
    ([1.0, 0.95, 0.91, 0.88, 0.87, 0.8], "min", 2, 0.05),  # small steps do not count
    ([0.5, 0.5, 0.5, 0.6], "max", 3, 0.0),  # ties are no improvement
    ([0.5, 0.7, 0.71, 0.72, 0.9, 0.91], "max", 2, 0.1),
    ([0.3, 0.2, 0.4, 0.4, 0.41, 0.39, 0.2], "max", 1, 0.0),
    ([2.0, 1.0, 1.0, 1.5, 0.2, 0.3, 0.4, 0.5], "min", 3, 0.0),
]


def zoo_rule(values, mode, patience, min_delta):
    early = EarlyStopping("val_loss", mode, patience, min_delta)
    for epoch, value in enumerate(values, 1):
        early.update(epoch, value)
        if early.stopped:
            break
    return early.stopped_epoch, early.best_epoch


def lightning_rule(values, mode, patience, min_delta):
    from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping

    callback = LightningEarlyStopping("val_loss", min_delta=min_delta, patience=patience, mode=mode)
    best = None
    for epoch, value in enumerate(values, 1):
        before = callback.best_score.item()
        stop, _ = callback._evaluate_stopping_criteria(torch.tensor(value))
        best = epoch if callback.best_score.item() != before else best
        if stop:
            return epoch, best
    return None, best


def keras_rule(values, mode, patience, min_delta):
    import keras

    callback = keras.callbacks.EarlyStopping("val_loss", min_delta=min_delta, patience=patience, mode=mode)
    callback.set_model(SimpleNamespace(stop_training=False))
    callback.on_train_begin()
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, {"val_loss": value})
        if callback.model.stop_training:
            return epoch + 1, callback.best_epoch + 1
    return None, callback.best_epoch + 1


@pytest.mark.parametrize(("values", "mode", "patience", "min_delta"), SEQUENCES)
def test_the_rule_is_lightnings_and_keras(values, mode, patience, min_delta):
    ours = zoo_rule(values, mode, patience, min_delta)
    assert ours == lightning_rule(values, mode, patience, min_delta)
    assert ours == keras_rule(values, mode, patience, min_delta)


def test_the_state_continues_the_decision():
    values = [1.0, 0.9, 0.95, 0.96, 0.97]
    whole = EarlyStopping("val_loss", "min", 3)
    for epoch, value in enumerate(values, 1):
        whole.update(epoch, value)
    first = EarlyStopping("val_loss", "min", 3)
    for epoch, value in enumerate(values[:3], 1):
        first.update(epoch, value)
    second = EarlyStopping("val_loss", "min", 3)
    second.restore(json.loads(json.dumps(first.state())))  # as a Keras state's position carries it
    for epoch, value in enumerate(values[3:], 4):
        second.update(epoch, value)
    assert second == whole and whole.stopped_epoch == 5 and whole.best_epoch == 2
    assert not EarlyStopping("val_loss", "min", None).improves(float("nan"))


def test_auto_mode_follows_the_metric():
    assert monitor_mode("val_loss") == "min" and monitor_mode("val_bpc") == "min"
    assert monitor_mode("val_accuracy") == "max" and monitor_mode("val_loss", "max") == "max"


def recipe(early: dict, **data):
    return load_recipe(
        {"model": {"architecture": "convnet-tiny"}, "data": data, "trainer": {"early_stopping": early}}
    )


@pytest.mark.parametrize(
    ("early", "data", "words"),
    [
        ({"monitor": "val_bpc"}, {}, ("'val_bpc' is not a metric of a classification run", "val_accuracy")),
        ({"monitor": "val_loss"}, {"val_fraction": 0}, ("val_fraction is 0", "train_")),
        ({"patience": 0}, {}, ("patience",)),
        ({"min_delta": -0.1}, {}, ("min_delta",)),
        ({"mode": "up"}, {}, ("mode",)),
        ({"monitor": "loss"}, {}, ("monitor",)),
    ],
)
def test_refusals(early, data, words):
    with pytest.raises(RecipeError) as raised:
        recipe(early, **data)
    message = str(raised.value)
    assert "1 problem(s)" in message and all(w in message for w in words), message


def test_refused_by_zoo_validate(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(f"base: {RECIPE}\ntrainer:\n  early_stopping:\n    monitor: val_f1x\n")
    result = invoke("validate", path)  # a recipe's problems: a header line, then one line each
    assert result.exit_code == 2 and "1 problem(s)" in result.output, result.output
    problem = result.output.strip().splitlines()[1]
    assert "trainer.early_stopping.monitor: 'val_f1x'" in problem and "val_loss" in problem


def test_no_validation_data_is_refused_before_training():
    from zoo.early_stopping import check_validation

    with pytest.raises(SetupError, match="no validation data"):
        check_validation(EarlyStopping("val_loss", "min", 2), 0)
    check_validation(EarlyStopping("train_loss", "min", 2), 0)


# min_delta 10: only the first epoch improves (val_loss < 2.5 here), so patience 3 stops at epoch 4.
# A constant rate: the runs whose max_epochs is raised on resume follow the same rates.
STOP = [
    "trainer.early_stopping.patience=3", "trainer.early_stopping.min_delta=10", "optimizer.lr=0.002",
    "schedule.name=constant", "schedule.warmup_steps=0",
]  # fmt: skip


def tensors(path):
    return load_file(str(path))


def raise_epochs(run_dir, before, after):
    path = run_dir / "recipe.yaml"
    path.write_text(path.read_text().replace(f"max_epochs: {before}", f"max_epochs: {after}"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("early")
    found = {}
    for framework in ("lightning", "keras"):
        whole = zoo.train(RECIPE, framework, tiny(root / framework, *STOP, "trainer.max_epochs=6"))
        # interrupted: after epoch 1 (its last checkpoint is epoch 1's weights), after epoch 2
        # (waiting), then on to the end
        part = zoo.train(RECIPE, framework, tiny(root / f"{framework}-parts", *STOP, "trainer.max_epochs=1"))
        first = shutil.copy(part.checkpoint, root / f"{framework}-epoch1.safetensors")
        raise_epochs(part.run_dir, 1, 2)
        zoo.api.resume(part.run_dir, force=True)
        raise_epochs(part.run_dir, 2, 6)
        resumed = zoo.api.resume(part.run_dir, force=True)
        found[framework] = SimpleNamespace(whole=whole, resumed=resumed, epoch1=first)
    return found


def summary(result):
    return json.loads((result.run_dir / "summary.json").read_text())["early_stopping"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_stops_and_exports_the_best_epoch(runs, framework):
    run = runs[framework]
    for result in (run.whole, run.resumed):
        assert [r["epoch"] for r in result.history] == ["1", "2", "3", "4"]
        recorded = summary(result)
        assert recorded["stopped_epoch"] == 4 and recorded["best"]["epoch"] == 1
        assert recorded["last"]["epoch"] == 4
        assert recorded["best"]["value"] == pytest.approx(float(result.history[0]["val_loss"]), rel=1e-5)
        assert recorded["last"]["value"] == pytest.approx(float(result.history[3]["val_loss"]), rel=1e-5)
        best = tensors(recorded["best"]["checkpoint"])
        # the weights epoch 1 ended with, bit for bit
        for name, value in tensors(run.epoch1).items():
            np.testing.assert_array_equal(best[name], value, err_msg=name)
        assert any(not np.array_equal(best[n], v) for n, v in tensors(result.checkpoint).items())
    # resumed mid-patience: the same epochs, rows and decision as the uninterrupted run
    for a, b in zip(run.whole.history, run.resumed.history, strict=True):
        assert a["val_loss"] == b["val_loss"] and a["train_loss"] == b["train_loss"]


@pytest.mark.slow
def test_both_frameworks_decide_alike(runs):
    lightning, keras = (summary(runs[f].whole) for f in ("lightning", "keras"))
    assert lightning["stopped_epoch"] == keras["stopped_epoch"] == 4
    assert lightning["best"]["epoch"] == keras["best"]["epoch"] == 1
    assert lightning["best"]["value"] == pytest.approx(keras["best"]["value"], rel=1e-5)
    a, b = tensors(lightning["best"]["checkpoint"]), tensors(keras["best"]["checkpoint"])
    for name in a:
        np.testing.assert_allclose(a[name], b[name], atol=1e-4, err_msg=name)
    loaded = zoo.load_checkpoint(keras["best"]["checkpoint"], "lightning")
    assert loaded is not None
