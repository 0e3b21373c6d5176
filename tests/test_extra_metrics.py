"""``trainer.metrics``: top-k accuracy, macro F1 and perplexity, equal in both frameworks.

The Lightning task (torchmetrics' top-k accuracy and per-class stat scores, zoo's epoch sums) and
the Keras metrics (Keras' ``SparseTopKCategoricalAccuracy``, zoo's ``MacroF1`` and ``Perplexity``)
are fed the same batches of random logits, some classes never labelled nor predicted; their
epoch values agree within 1e-6 and equal scikit-learn's ``f1_score(average="macro")`` and numpy's
top-k and exp(mean cross-entropy) on the same predictions. Then real runs of both frameworks log
them alike in metrics.csv, TensorBoard and summary.json, and ``zoo evaluate`` gives scikit-learn's
numbers on the checkpoint's own test predictions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import RECIPE, tiny
from scipy.special import logsumexp
from sklearn.metrics import f1_score

import zoo
import zoo.api
from zoo.data import load_dataset
from zoo.hardware import SetupError
from zoo.keras.steps import extra_measures
from zoo.lightning.task import ClassificationTask, LanguageModelTask
from zoo.recipe import RecipeError, load_recipe
from zoo.tracking import read_tensorboard

CLASSES = 12
ONE_PROCESS = SimpleNamespace(reduce=lambda tensor, reduce_op: tensor)  # a strategy's reduce, alone
BATCHES = (32, 32, 17)  # the last batch short, as an epoch's is
LM_RECIPE = Path(__file__).parent.parent / "recipes" / "lstm-charlm.yaml"


def batches(seed: int, shape=(), classes: int = CLASSES):
    """Random logits whose predictions never reach the last two classes; labels that never name
    the last one: classes in neither count in no F1 average."""
    rng = np.random.default_rng(seed)
    for size in BATCHES:
        logits = rng.normal(size=(size, *shape, classes)).astype(np.float32) * 3
        logits[..., -2:] -= 50
        yield logits, rng.integers(0, classes - 1, size=(size, *shape)).astype(np.int64)


def lightning_epoch(task_class, names, seed, shape=()):
    task = task_class(torch.nn.Identity(), None, None, extra=names)
    for logits, labels in batches(seed, shape):
        task._step((torch.from_numpy(logits), torch.from_numpy(labels)), "val")
    return {k: float(v) for k, v in task.sums["val"].means(ONE_PROCESS).items()}


def keras_epoch(names, seed, shape=()):
    measures = extra_measures(names, SimpleNamespace(num_classes=CLASSES))
    for logits, labels in batches(seed, shape):
        for measure in measures:
            measure.update_state(labels, logits)
    return {m.name: float(m.result()) for m in measures}


def test_classification_metrics_agree_with_sklearn():
    names = ("top1_accuracy", "top3_accuracy", "macro_f1")
    torch_side, keras_side = lightning_epoch(ClassificationTask, names, 0), keras_epoch(names, 0)
    logits, labels = (np.concatenate(parts) for parts in zip(*batches(0), strict=True))
    ranked = np.argsort(-logits, axis=-1)
    reference = {
        "top1_accuracy": float(np.mean(ranked[:, 0] == labels)),
        "top3_accuracy": float(np.mean((ranked[:, :3] == labels[:, None]).any(-1))),
        "macro_f1": f1_score(labels, logits.argmax(-1), average="macro"),
    }
    assert 0.05 < reference["macro_f1"] < 0.5  # neither a trivial zero nor a one
    # the F1 of the classes seen only: averaged over all 12 it would be lower
    assert reference["macro_f1"] != pytest.approx(
        f1_score(labels, logits.argmax(-1), average="macro", labels=range(CLASSES), zero_division=0), abs=1e-3
    )
    for name, value in reference.items():
        assert torch_side[name] == pytest.approx(value, abs=1e-6), name
        assert keras_side[name] == pytest.approx(value, abs=1e-6), name
    assert torch_side["top1_accuracy"] == pytest.approx(torch_side["accuracy"], abs=1e-7)


def test_perplexity_is_exp_of_the_mean_cross_entropy():
    torch_side = lightning_epoch(LanguageModelTask, ("perplexity",), 1, shape=(9,))
    keras_side = keras_epoch(("perplexity",), 1, shape=(9,))
    nats, weights = [], []
    for logits, labels in batches(1, (9,)):
        picked = np.take_along_axis(logits, labels[..., None], -1)[..., 0].astype(np.float64)
        nats.append(np.mean(logsumexp(logits.astype(np.float64), axis=-1) - picked))
        weights.append(len(labels))  # each batch weighted by its samples, as the loss's epoch mean
    reference = float(np.exp(np.average(nats, weights=weights)))
    assert reference > 10
    assert torch_side["perplexity"] == pytest.approx(reference, rel=1e-6)
    assert keras_side["perplexity"] == pytest.approx(reference, rel=1e-6)
    assert torch_side["perplexity"] == pytest.approx(2 ** torch_side["bpc"], rel=1e-6)


@pytest.mark.parametrize(
    ("data", "metrics", "words"),
    [
        ({}, ["perplexity"], "'perplexity' is not a metric of a classification run"),
        ({}, ["top0_accuracy"], "top5_accuracy"),
        ({}, ["f1"], "macro_f1"),
        ({}, ["macro_f1", "macro_f1"], "names a metric twice"),
        (
            {"name": "text", "path": str(RECIPE)},
            ["macro_f1"],
            "a language_modeling run; it offers perplexity",
        ),
    ],
)
def test_refusals(data, metrics, words):
    raw = {"model": {"architecture": "convnet-tiny"}, "trainer": {"metrics": metrics}}
    if data:
        raw = {"model": {"architecture": "lstm"}, "data": data, "trainer": {"metrics": metrics}}
    with pytest.raises(RecipeError, match="1 problem") as raised:
        load_recipe(raw)
    assert "trainer.metrics" in str(raised.value) and words in str(raised.value), str(raised.value)


def test_a_k_over_the_classes_is_refused_before_a_run(tmp_path):
    refusal = "top11_accuracy but the model has 10 classes; use a k of at most 10"
    with pytest.raises(SetupError, match=refusal):
        zoo.train(RECIPE, "lightning", tiny(tmp_path, "trainer.metrics=[top11_accuracy]"))
    assert not list(tmp_path.iterdir())  # no run folder


def test_early_stopping_may_monitor_them():
    trainer = {"metrics": ["macro_f1"], "early_stopping": {"monitor": "val_macro_f1"}}
    recipe = load_recipe({"model": {"architecture": "convnet-tiny"}, "trainer": trainer})
    assert recipe.trainer.early_stopping.monitor == "val_macro_f1"


NAMES = ["top3_accuracy", "macro_f1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics")
    overrides = ["trainer.max_epochs=1", f"trainer.metrics=[{', '.join(NAMES)}]"]
    return {fw: zoo.train(RECIPE, fw, tiny(root / fw, *overrides)) for fw in ("lightning", "keras")}


@pytest.mark.slow
def test_runs_log_them_alike(runs):
    lightning, keras = runs["lightning"], runs["keras"]
    for name in NAMES:
        for stage in ("train", "val"):
            a, b = float(lightning.history[0][f"{stage}_{name}"]), float(keras.history[0][f"{stage}_{name}"])
            assert a == pytest.approx(b, abs=1e-5), (stage, name)  # metrics.csv keeps 6 digits
        assert lightning.metrics[f"test_{name}"] == pytest.approx(keras.metrics[f"test_{name}"], abs=1e-6)
        for result in (lightning, keras):
            summary = json.loads((result.run_dir / "summary.json").read_text())
            assert summary["metrics"][f"test_{name}"] == result.metrics[f"test_{name}"]
            logged = read_tensorboard(result.run_dir / "tb")[f"val/{name}"]
            assert logged[0][1] == pytest.approx(float(result.history[0][f"val_{name}"]), rel=1e-5)


@pytest.mark.slow
def test_evaluate_gives_sklearns_numbers(runs):
    result = runs["keras"]
    recipe = load_recipe(result.run_dir / "recipe.yaml")
    test = load_dataset(recipe.data, "image").test
    model = zoo.load_checkpoint(result.checkpoint, "lightning")
    with torch.no_grad():
        logits = model(torch.from_numpy(test.x)).numpy()
    top3 = float(np.mean((np.argsort(-logits, -1)[:, :3] == test.y[:, None]).any(-1)))
    f1 = f1_score(test.y, logits.argmax(-1), average="macro")
    for framework in ("lightning", "keras"):
        metrics = zoo.evaluate(result.run_dir, framework=framework)
        assert metrics["test_top3_accuracy"] == pytest.approx(top3, abs=1e-6), framework
        assert metrics["test_macro_f1"] == pytest.approx(f1, abs=1e-6), framework


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_a_mid_epoch_resume_keeps_the_epochs_counts(tmp_path, framework):
    """Resumed 7 steps into its only epoch, a run's row has the macro F1 of the whole epoch:
    the confusion counts of the steps before travel in the training state."""
    overrides = ["trainer.max_epochs=1", "trainer.metrics=[macro_f1]", "export.state_every_n_steps=7"]
    whole = zoo.train(RECIPE, framework, tiny(tmp_path / "whole", *overrides, "export.keep_states=5"))
    copy = Path(shutil.copytree(whole.run_dir, tmp_path / "copy"))
    for path in sorted((copy / "state").iterdir()):
        if not path.name.startswith("step-000000007."):
            path.unlink()
    (copy / "summary.json").unlink()  # interrupted after step 7: nothing after it was written
    resumed = zoo.api.resume(copy)
    assert resumed.history[0]["train_macro_f1"] == whole.history[0]["train_macro_f1"]
    assert resumed.history[0]["val_macro_f1"] == whole.history[0]["val_macro_f1"]


@pytest.mark.slow
def test_a_language_model_run_logs_perplexity(tmp_path):
    """Perplexity beside bits per character, in both frameworks: 2 ** bpc of the same epoch."""
    text = tmp_path / "text.txt"
    words = np.random.default_rng(0).choice(["def", "class", "return", "zoo", "(x)", ":"], size=3000)
    text.write_text(" ".join(words))
    overrides = [
        "model.architecture=lstm-tiny", f"data.path={text}", "data.seq_len=16", "data.batch_size=32",
        "trainer.max_epochs=1", "trainer.progress_bar=false", "trainer.metrics=[perplexity]",
        "trainer.early_stopping.monitor=val_perplexity", "trainer.early_stopping.patience=null",
    ]  # fmt: skip
    found = {}
    for framework in ("lightning", "keras"):
        result = zoo.train(LM_RECIPE, framework, [*overrides, f"export.dir={tmp_path / framework}"])
        row = result.history[0]
        for stage in ("train", "val"):
            assert float(row[f"{stage}_perplexity"]) == pytest.approx(
                2 ** float(row[f"{stage}_bpc"]), rel=1e-5
            )
        found[framework] = result.metrics["test_perplexity"]
        assert found[framework] == pytest.approx(2 ** result.metrics["test_bpc"], rel=1e-6)
        summary = json.loads((result.run_dir / "summary.json").read_text())["early_stopping"]
        assert summary["mode"] == "min" and summary["best"]["epoch"] == 1
    assert found["lightning"] == pytest.approx(found["keras"], rel=1e-4)  # one epoch of two twins
