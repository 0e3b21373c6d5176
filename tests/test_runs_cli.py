"""zoo runs, zoo runs show, zoo plot, and --json / --quiet for scripts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from zoo.checkpoint.state import state_path
from zoo.cli import main
from zoo.metrics_file import MetricsLog

RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
PNG = b"\x89PNG\r\n\x1a\n"


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def fake_run(root: Path, name: str, framework: str = "lightning", epochs: int = 2, **summary) -> Path:
    """A run folder as zoo writes it, without the training: recipe, metrics rows, summary."""
    run = root / name
    run.mkdir(parents=True)
    model = "model:\n  architecture: cnn\n  preset: convnet-tiny\n"
    run.joinpath("recipe.yaml").write_text(f"name: digits\n{model}trainer:\n  framework: {framework}\n")
    log = MetricsLog(run / "metrics.csv", "classification")
    for epoch in range(1, epochs + 1):
        log.append({
            "epoch": epoch, "step": 10 * epoch, "lr": 0.001, "train_loss": 2.0 / epoch,
            "train_accuracy": 0.3 * epoch, "val_loss": 2.2 / epoch,
            "val_accuracy": [0.5, 0.7, 0.6][epoch - 1], "epoch_seconds": 1.5,
        })  # fmt: skip
    if summary:
        run.joinpath("summary.json").write_text(json.dumps(summary))
    if summary.get("status", "finished") == "finished" and "metrics" in summary:
        run.joinpath("model.safetensors").write_bytes(b"not read by zoo runs")
    return run


@pytest.fixture
def export_dir(tmp_path):
    root = tmp_path / "checkpoints"
    tested = {"test_accuracy": 0.61, "test_loss": 1.1}
    fake_run(root, "done-lightning", epochs=3, metrics=tested, total_seconds=75)
    fake_run(root, "done-keras", framework="keras", metrics={"test_accuracy": 0.6}, total_seconds=9)
    stopped = fake_run(root, "stopped-lightning", epochs=1)
    state_path(stopped, 10, "ckpt").parent.mkdir()
    state_path(stopped, 10, "ckpt").write_bytes(b"")
    fake_run(root, "nan-keras", framework="keras", epochs=1, status="diverged", step=7, error="loss nan")
    broken = root / "broken"
    broken.mkdir()
    broken.joinpath("summary.json").write_text("{ not json")
    broken.joinpath("recipe.yaml").write_text("model: [unclosed")
    (root / "compare-report").mkdir()  # not a run folder: not listed
    return root


def test_runs_lists_every_run_with_its_status(export_dir):
    result = invoke("runs", "--dir", export_dir, "--json")
    assert result.exit_code == 0, result.output
    runs = {r["run"]: r for r in json.loads(result.stdout)}
    assert {name: r["status"] for name, r in runs.items()} == {
        "done-lightning": "finished", "done-keras": "finished", "stopped-lightning": "interrupted",
        "nan-keras": "diverged", "broken": "damaged",
    }  # fmt: skip
    done = runs["done-lightning"]
    assert done["best"] == {"metric": "val_accuracy", "value": 0.7, "epoch": 2}
    assert done["framework"] == "lightning" and done["architecture"] == "convnet-tiny" and done["epochs"] == 3
    assert done["seconds"] == 75 and done["checkpoint"].endswith("model.safetensors")
    stopped = runs["stopped-lightning"]
    assert stopped["seconds"] == pytest.approx(1.5) and stopped["checkpoint"] is None
    assert "recipe.yaml does not read" in " ".join(runs["broken"]["problems"])


def test_runs_table_and_filters(export_dir):
    table = invoke("runs", "--dir", export_dir)
    assert table.exit_code == 0 and "Traceback" not in table.output
    assert "damaged: recipe.yaml does not read" in table.output and "val_accuracy 0.7 (ep 2)" in table.output
    keras = invoke("runs", "--dir", export_dir, "--framework", "keras", "--quiet")
    assert sorted(Path(p).name for p in keras.stdout.split()) == ["done-keras", "nan-keras"]
    finished = invoke(
        "runs", "--dir", export_dir, "--status", "finished", "--architecture", "convnet-tiny", "-q"
    )
    assert sorted(Path(p).name for p in finished.stdout.split()) == ["done-keras", "done-lightning"]
    assert "no runs under" in invoke("runs", "--dir", export_dir, "--status", "running").output


def test_runs_show_says_how_to_go_on(export_dir):
    done = invoke("runs", "show", "done-keras", "--dir", export_dir)
    assert done.exit_code == 0, done.output
    assert f"zoo evaluate {export_dir / 'done-keras' / 'model.safetensors'} --recipe" in done.output
    assert "--framework keras" in done.output and "zoo finetune RECIPE --from" in done.output
    assert "zoo resume" not in done.output and "test accuracy 0.6" in done.output
    assert "recipe.yaml:\nname: digits" in done.output
    stopped = invoke("runs", "show", export_dir / "stopped-lightning")
    assert f"zoo resume {export_dir / 'stopped-lightning'}" in stopped.output
    diverged = json.loads(invoke("runs", "show", "nan-keras", "--dir", export_dir, "--json").stdout)
    assert diverged["status"] == "diverged" and "--force" in diverged["commands"]["resume"]
    broken = invoke("runs", "show", "broken", "--dir", export_dir)
    assert broken.exit_code == 0 and "damaged" in broken.output and "Traceback" not in broken.output
    missing = invoke("runs", "show", "nope", "--dir", export_dir)
    assert missing.exit_code == 2 and "nope is not a run folder" in missing.output


def test_plot_overlays_runs(export_dir, tmp_path):
    out = tmp_path / "figures" / "curves.png"
    result = invoke("plot", "done-lightning", "done-keras", "--dir", export_dir, "-o", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG
    from matplotlib.image import imread

    height, width = imread(out).shape[:2]
    assert width > 2 * height  # one panel per quantity side by side: loss, accuracy, learning rate


def test_runs_show_and_plot_for_scripts(export_dir, tmp_path):
    """--quiet: a run's status, the PNG's path; --json: one document on stdout."""
    statuses = [
        invoke("runs", "show", name, "--dir", export_dir, "-q").stdout for name in ("done-keras", "nan-keras")
    ]
    assert statuses == ["finished\n", "diverged\n"]
    out = tmp_path / "curves.png"
    result = invoke("plot", "done-lightning", "nan-keras", "--dir", export_dir, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "path": str(out), "runs": [str(export_dir / "done-lightning"), str(export_dir / "nan-keras")],
        "panels": ["loss", "accuracy"],  # both runs' learning rate is constant: no panel for it
    }  # fmt: skip
    assert out.read_bytes()[:8] == PNG
    quiet = invoke("plot", "done-lightning", "--dir", export_dir, "-o", out, "--quiet")
    assert quiet.exit_code == 0 and quiet.stdout == f"{out}\n"


def test_plot_has_one_legend_short_labels_a_log_loss_axis_and_a_changing_lr(export_dir, tmp_path):
    """One legend for the figure (each run once, then train/val), --label names the runs,
    --log-loss draws the loss panel on a log scale, and a learning rate that changes gets its panel."""
    import matplotlib.pyplot as plt

    from zoo.plot import draw

    decayed = export_dir / "decayed"
    fake_run(export_dir, "decayed", epochs=3)
    rows = (decayed / "metrics.csv").read_text().splitlines()
    column = rows[0].split(",").index("lr")
    edited = [rows[0]] + [
        ",".join(f"{0.001 / (i + 1)}" if c == column else v for c, v in enumerate(row.split(",")))
        for i, row in enumerate(rows[1:])
    ]
    (decayed / "metrics.csv").write_text("\n".join(edited) + "\n")
    runs = [export_dir / "done-lightning", decayed]
    figure, names = draw(runs, None, ["base", "decay"], log_loss=True)
    try:
        assert names == ["loss", "accuracy", "lr"]
        axes = figure.axes
        assert [axis.get_yscale() for axis in axes] == ["log", "linear", "linear"]
        assert all(axis.get_legend() is None for axis in axes) and len(figure.legends) == 1
        assert [t.get_text() for t in figure.legends[0].get_texts()] == ["base", "decay", "train", "val"]
    finally:
        plt.close(figure)
    constant, _ = draw(runs[:1], None, None, log_loss=False)
    try:
        assert [axis.get_title() for axis in constant.axes] == ["loss", "accuracy"]
        assert [t.get_text() for t in constant.legends[0].get_texts()] == ["done-lightning", "train", "val"]
        assert constant.axes[0].get_yscale() == "linear"
    finally:
        plt.close(constant)
    out = tmp_path / "labelled.png"
    args = ["plot", *runs, "-o", out, "--label", "base", "--label", "decay", "--log-loss", "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["panels"] == ["loss", "accuracy", "lr"] and out.read_bytes()[:8] == PNG
    wrong = invoke("plot", *runs, "-o", out, "--label", "only-one")
    assert wrong.exit_code == 2
    assert "error: --label: 1 labels for 2 runs; give one per run, in order" in wrong.output


def test_plot_refuses_a_run_without_metrics(export_dir, tmp_path):
    result = invoke("plot", "done-keras", "broken", "--dir", export_dir, "-o", tmp_path / "x.png")
    assert result.exit_code == 2 and "broken has no metrics.csv" in result.output
    assert not (tmp_path / "x.png").exists()
    unknown = invoke("plot", "nothing-here", "--dir", export_dir, "-o", tmp_path / "x.png")
    assert unknown.exit_code == 2 and "is not a run folder" in unknown.output


def test_list_and_inspect_for_scripts():
    names = invoke("list", "--quiet").stdout.split()
    entries = json.loads(invoke("list", "--json").stdout)
    assert names == [e["name"] for e in entries] and "convnet-tiny" in names


def test_train_json_is_the_only_thing_on_stdout(tmp_path):
    """The progress bar stays on (it goes to stderr); stdout parses as one JSON document, and
    the run it names is then listed, shown and plotted."""
    result = invoke(
        "train", RECIPE, "--json", "--set", "model.architecture=convnet-tiny",
        "--set", "trainer.max_epochs=1", "--set", "data.batch_size=128", "--set", f"export.dir={tmp_path}",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    run = Path(document["run_dir"])
    assert document["framework"] == "lightning" and 0 <= document["metrics"]["test_accuracy"] <= 1
    listed = json.loads(invoke("runs", "--dir", tmp_path, "--json").stdout)
    assert [(r["run"], r["status"], r["epochs"]) for r in listed] == [(run.name, "finished", 1)]
    assert (run / "tb").is_dir()
    shown = invoke("runs", "show", run)
    assert f"tensorboard --logdir {run / 'tb'}" in shown.output
    quiet = invoke("inspect", document["checkpoint"], "--quiet")
    tensors = len(json.loads(invoke("inspect", document["checkpoint"], "--json").stdout)["tensors"])
    checkpoint = document["checkpoint"]
    assert quiet.stdout.strip() == f"{checkpoint}: convnet-tiny, classification, {tensors} tensors"


def test_a_lora_run_is_listed_finished_with_its_adapter(tmp_path):
    """A LoRA run (init.lora) exports adapter.safetensors, no model.safetensors: it used to be
    listed as damaged ("model.safetensors is missing"). Its commands evaluate and sample the
    adapter, and fine-tune from it once merged into its base."""
    run = fake_run(tmp_path, "lora-keras", framework="keras", metrics={"test_loss": 2.0})
    run.joinpath("model.safetensors").unlink()
    run.joinpath("adapter.safetensors").write_bytes(b"not read by zoo runs")
    recipe = run / "recipe.yaml"
    recipe.write_text(recipe.read_text() + "data:\n  name: text\ninit:\n  lora:\n    rank: 4\n")
    summary = json.loads(run.joinpath("summary.json").read_text())
    run.joinpath("summary.json").write_text(
        json.dumps({**summary, "checkpoint": str(run / "adapter.safetensors")})
    )
    listed = json.loads(invoke("runs", "--dir", tmp_path, "--json").stdout)
    assert [(r["status"], r["checkpoint"], r["adapter"]) for r in listed] == [
        ("finished", str(run / "adapter.safetensors"), True)
    ]
    shown = json.loads(invoke("runs", "show", run, "--json").stdout)
    adapter, merged = run / "adapter.safetensors", run / "merged.safetensors"
    assert shown["commands"] == {
        "evaluate": f"zoo evaluate {adapter} --recipe {run / 'recipe.yaml'} --framework keras",
        "sample": f"zoo sample {adapter} --prompt 'The ' --length 200 --framework keras",
        "merge": f"zoo merge {adapter} -o {merged}",
        "finetune": f"zoo finetune RECIPE --from {merged}",
        "plot": f"zoo plot {run} -o {run / 'curves.png'}",
    }
    # Its adapter gone, it is damaged, saying which file is missing.
    adapter.unlink()
    (gone,) = json.loads(invoke("runs", "--dir", tmp_path, "--json").stdout)
    assert gone["status"] == "damaged" and gone["problems"] == [
        "summary.json says finished but adapter.safetensors is missing"
    ]


def test_the_commands_name_absolute_paths_quoted_for_a_shell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = fake_run(Path("my runs"), "done", metrics={"test_accuracy": 0.5})
    commands = json.loads(invoke("runs", "show", "done", "--dir", "my runs", "--json").stdout)["commands"]
    where = tmp_path / "my runs" / "done"
    evaluate = f"zoo evaluate '{where / 'model.safetensors'}' --recipe '{where / 'recipe.yaml'}'"
    assert commands["evaluate"] == f"{evaluate} --framework lightning"
    assert run.is_dir()


def test_a_saved_recipe_keeps_absolute_paths():
    from zoo.recipe.schema import anchored_paths

    raw = {
        "data": {"name": "stream", "path": ["shards/*.jsonl", "/abs/x.parquet"], "validation": "v",
                 "tokenizer": "tok/tokenizer.json"},
        "init": {"from": "../base.safetensors"},
        "export": {"dir": "checkpoints"},
    }  # fmt: skip
    assert anchored_paths(raw, "/work/here") == {
        "data": {"name": "stream", "path": ["/work/here/shards/*.jsonl", "/abs/x.parquet"],
                 "validation": "/work/here/v", "tokenizer": "/work/here/tok/tokenizer.json"},
        "init": {"from": "/work/base.safetensors"},
        "export": {"dir": "checkpoints"},  # where runs go is not a file the run reads
    }  # fmt: skip
    for name in ("char", "bpe"):
        assert anchored_paths({"data": {"tokenizer": name}}, "/w") == {"data": {"tokenizer": name}}
    assert anchored_paths({"data": {"name": "image_folder", "root": "my-images"}}, "/w")["data"]["root"] == (
        "/w/my-images"
    )


def test_the_printed_commands_work_from_another_directory(tmp_path, monkeypatch):
    """The issue's case: a run on relative data (data.root: my-images) kept the relative path in
    its recipe, and the evaluate command zoo runs show printed failed from any other directory."""
    import numpy as np
    from safetensors import safe_open

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 8, 8), dtype=np.float32), np.arange(64) % 2
    np.savez(work / "digits.npz", x_train=x, y_train=y, x_test=x[:16], y_test=y[:16])
    monkeypatch.chdir(work)
    settings = [
        "model.architecture=convnet-tiny", "trainer.max_epochs=1", "trainer.progress_bar=false",
        "data.name=npz", "data.path=digits.npz", "data.batch_size=16", "export.dir=runs",
        "export.run_name=rel", "tracking.tensorboard=false",
    ]  # fmt: skip
    trained = invoke("train", RECIPE, *(a for s in settings for a in ("--set", s)))
    assert trained.exit_code == 0, trained.output
    run = work / "runs" / "rel"
    saved = str(work / "digits.npz")
    assert f"path: {saved}" in (run / "recipe.yaml").read_text()
    with safe_open(str(run / "model.safetensors"), "np") as handle:
        assert json.loads(handle.metadata()["recipe"])["data"]["path"] == saved

    monkeypatch.chdir(elsewhere)
    commands = json.loads(invoke("runs", "show", run, "--json").stdout)["commands"]
    command = shlex.split(commands["evaluate"])
    assert command[:2] == ["zoo", "evaluate"]
    evaluated = invoke(*command[1:])
    assert evaluated.exit_code == 0, evaluated.output
    assert list(elsewhere.iterdir()) == []
