"""Tracking: TensorBoard event files with one tag vocabulary in both frameworks, equal to
metrics.csv, and an MLflow run per training run (params, metrics, the checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

import zoo
from zoo.metrics_file import read_metrics
from zoo.recipe import load_recipe
from zoo.runs import RunDir
from zoo.tracking import STEP_TAGS, column_tag, open_tracker, read_tensorboard

RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
EVERY = 5
TINY = [
    "model.architecture=convnet-tiny",
    "trainer.max_epochs=2",
    "trainer.progress_bar=false",
    "data.batch_size=64",  # 1257 samples: 20 batches an epoch, the last one short
    "trainer.accumulate_grad_batches=2",  # 10 optimizer steps an epoch, the last over the short batch
    f"tracking.log_every_n_steps={EVERY}",
    "tracking.mlflow.enabled=true",
    "tracking.mlflow.experiment=zoo-tests",
]


# Two short trainings and an MLflow store's first tables: ~40 s for the tests that share them.
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracked")
    overrides = [*TINY, f"export.dir={root}"]
    found = {fw: zoo.train(RECIPE, framework=fw, overrides=overrides) for fw in ("lightning", "keras")}
    return root, found


def scalars(result):
    return read_tensorboard(result.run_dir / "tb")


@slow
def test_both_frameworks_write_the_same_tags(runs):
    _, found = runs
    tags = {fw: set(scalars(result)) for fw, result in found.items()}
    columns = [c for c in found["lightning"].history[0] if column_tag(c)]
    expected = {column_tag(c) for c in columns} | set(STEP_TAGS) | {"perf/samples_per_second", "epoch"}
    assert tags["lightning"] == tags["keras"] == expected


@slow
@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_epoch_tags_are_the_metrics_csv(runs, framework):
    result = runs[1][framework]
    events = scalars(result)
    rows = read_metrics(result.run_dir / "metrics.csv")
    assert len(rows) == 2
    for row in rows:
        step = int(row["step"])
        for column, text in row.items():
            tag = column_tag(column)
            if tag is None:
                continue
            logged = dict(events[tag])
            # The CSV keeps 6 significant digits (5e-6 relative at worst); the event files float32.
            assert logged[step] == pytest.approx(float(text), rel=6e-6), (framework, tag, step)


@slow
def test_step_tags_agree_between_the_twins(runs):
    """Same init, same batches: the per-step loss (the mean over an accumulated step, the short
    batch included), learning rate and gradient norm are the same numbers in both frameworks."""
    events = {fw: scalars(result) for fw, result in runs[1].items()}
    for tag in ("train/loss_step", "optim/lr_step", "optim/grad_norm_step"):
        torch_side, keras_side = events["lightning"][tag], events["keras"][tag]
        assert [s for s, _ in torch_side] == [s for s, _ in keras_side] == [5, 10, 15, 20], tag
        for (_, a), (_, b) in zip(torch_side, keras_side, strict=True):
            assert a == pytest.approx(b, rel=1e-4), tag
    assert all(v > 0 for _, v in events["keras"]["perf/samples_per_second_step"])


@slow
def test_mlflow_round_trip(runs):
    mlflow = pytest.importorskip("mlflow")
    root, found = runs
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{root.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("zoo-tests")
    logged = {r.data.tags["zoo.framework"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(logged) == {"lightning", "keras"}
    for framework, result in found.items():
        run = logged[framework]
        assert run.info.status == "FINISHED" and run.info.run_name == result.run_dir.name
        assert run.data.params["trainer.framework"] == framework
        assert run.data.params["model.preset"] == "convnet-tiny"
        assert run.data.params["data.batch_size"] == "64"
        rows = read_metrics(result.run_dir / "metrics.csv")
        history = client.get_metric_history(run.info.run_id, "val/loss")
        assert [(m.step, m.value) for m in history] == [
            (int(r["step"]), pytest.approx(float(r["val_loss"]), rel=6e-6)) for r in rows
        ]
        assert run.data.metrics["test/accuracy"] == pytest.approx(result.metrics["test_accuracy"])
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"model.safetensors", "recipe.yaml", "metrics.csv"} <= artifacts
        local = Path(client.download_artifacts(run.info.run_id, "model.safetensors", str(root / framework)))
        assert local.read_bytes() == result.checkpoint.read_bytes()
    # The default store and its artifacts live in the export directory, not the working directory.
    assert (root / "mlartifacts").is_dir()


def test_tracking_off_opens_nothing(tmp_path):
    recipe = load_recipe(RECIPE, ["tracking.tensorboard=false", f"export.dir={tmp_path}"])
    assert recipe.tracking.mlflow.enabled is False
    assert open_tracker(recipe, tmp_path, 100, writer_factory=lambda folder: pytest.fail("opened")) is None
    assert load_recipe(RECIPE, ["tracking.mlflow=true"]).tracking.mlflow.enabled is True


def test_tracking_settings_are_not_a_recipe_change(tmp_path):
    """Where the curves go changes nothing the training states were trained with."""
    run = RunDir.create(tmp_path, "run")
    recipe = load_recipe(RECIPE).to_dict()
    run.write_recipe(recipe, "")
    edited = {**recipe, "tracking": {**recipe["tracking"], "tensorboard": False, "log_every_n_steps": 1}}
    assert run.recipe_changes(edited) == []
    edited["trainer"] = {**recipe["trainer"], "max_epochs": 3}
    assert run.recipe_changes(edited) == ["trainer.max_epochs: 30 -> 3"]


def test_a_field_added_since_a_run_started_is_no_recipe_change(tmp_path):
    """A run recorded before trainer.label_smoothing and trainer.max_steps existed resumes: its
    record is read by today's schema, the new fields at their defaults."""
    run = RunDir.create(tmp_path, "run")
    recipe = load_recipe(RECIPE).to_dict()
    older = {
        **recipe,
        "trainer": {k: v for k, v in recipe["trainer"].items() if k not in ("label_smoothing", "max_steps")},
    }
    run.write_recipe(older, "")
    assert run.recipe_changes(recipe) == []
    assert run.recipe_changes({**recipe, "trainer": {**recipe["trainer"], "label_smoothing": 0.1}}) == [
        "trainer.label_smoothing: 0.0 -> 0.1"
    ]
