"""Training by recipe in both frameworks: run folders, identical CSV columns, cross-loading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import max_diff

import zoo
from zoo.data import load_dataset
from zoo.keras.data import keras_layout
from zoo.recipe import DigitsData

RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
TINY = [
    "model.architecture=convnet-tiny",
    "trainer.max_epochs=2",
    "trainer.progress_bar=false",
    "data.batch_size=64",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny run per framework, shared by the tests below."""
    root = tmp_path_factory.mktemp("runs")
    overrides = [*TINY, f"export.dir={root}"]
    return {fw: zoo.train(RECIPE, framework=fw, overrides=overrides) for fw in ("lightning", "keras")}


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_a_run_writes_its_folder(runs, framework):
    result = runs[framework]
    files = {p.name for p in result.run_dir.iterdir()}
    assert {"recipe.yaml", "metrics.csv", "model.safetensors", "summary.json"} <= files
    assert result.checkpoint == result.run_dir / "model.safetensors"
    resolved = zoo.load_recipe(result.run_dir / "recipe.yaml")
    assert resolved.trainer.framework == framework and resolved.model.num_classes == 10
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["metrics"]["test_accuracy"] == pytest.approx(result.metrics["test_accuracy"])
    assert 0.0 < result.metrics["test_accuracy"] <= 1.0 and np.isfinite(result.metrics["test_loss"])


def test_both_frameworks_write_the_same_csv_columns(runs):
    histories = {fw: r.history for fw, r in runs.items()}
    assert list(histories["lightning"][0]) == list(histories["keras"][0])
    assert list(histories["lightning"][0]) == [
        "epoch", "step", "lr", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "epoch_seconds",
    ]  # fmt: skip
    for history in histories.values():
        assert [row["epoch"] for row in history] == ["1", "2"]
        assert [row["step"] for row in history] == ["20", "40"]  # 1257 samples / 64 per batch
        assert float(history[1]["train_loss"]) < float(history[0]["train_loss"])


@pytest.mark.parametrize("source", ["lightning", "keras"])
def test_a_checkpoint_gives_the_same_logits_in_both_frameworks(runs, source):
    path = runs[source].checkpoint
    torch_model = zoo.load_checkpoint(path, framework="torch").eval()
    keras_model = zoo.load_checkpoint(path, framework="keras")
    test = load_dataset(DigitsData(), "image").test
    with torch.no_grad():
        torch_logits = torch_model(torch.from_numpy(test.x)).numpy()
    keras_logits = np.asarray(keras_model(keras_layout(test.x, "image"), training=False))
    assert max_diff(torch_logits, keras_logits) <= 1e-5
    accuracy = (torch_logits.argmax(1) == test.y).mean()
    assert accuracy == (keras_logits.argmax(1) == test.y).mean()
    assert accuracy == pytest.approx(runs[source].metrics["test_accuracy"], abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_default_recipe_reaches_its_accuracy_target(framework, tmp_path):
    result = zoo.train(
        RECIPE, framework=framework, overrides=["trainer.progress_bar=false", f"export.dir={tmp_path}"]
    )
    assert result.metrics["test_accuracy"] >= 0.97
    assert result.metrics["train_seconds"] < 60


def test_keras_traces_its_training_step_once(monkeypatch, tmp_path):
    """Keras builds an unbuilt optimizer inside the first traced step, where TensorFlow wraps
    each slot's initialiser in a conditional and then traces the whole step again: zoo builds it
    before ``fit`` (half the start-up of a small model)."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    traced = []
    step = TensorFlowTrainer.train_step

    def counted(self, data):
        traced.append(1)  # Python runs only while TensorFlow traces
        return step(self, data)

    monkeypatch.setattr(TensorFlowTrainer, "train_step", counted)
    result = zoo.train(RECIPE, framework="keras", overrides=[*TINY, f"export.dir={tmp_path}"])
    assert len(result.history) == 2 and len(traced) == 1
