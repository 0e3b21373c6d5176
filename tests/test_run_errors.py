"""Runs that fail and resumes that are refused: divergence stops both frameworks at the same step
and keeps the last finite state; non-finite checkpoints, tampered states, edited recipes, a damaged
recipe record and a second resume of a held run each end in one message and the documented exit
status."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import nested, train, zoo
from conftest import RECIPE, tiny
from safetensors.numpy import load_file, save_file
from trained_runs import copy_run

from zoo.checkpoint.state import latest_state
from zoo.hardware import SetupError
from zoo.limits import MAX_DEPTH
from zoo.metrics_file import read_metrics
from zoo.runs import RunDir

DIVERGE = (
    "optimizer.name=sgd",
    "optimizer.lr=1e6",
    "schedule.warmup_steps=0",
    "export.state_every_n_steps=1",
)


def test_divergence_stops_both_frameworks_at_the_same_step_and_keeps_the_last_finite_state(tmp_path):
    steps = {}
    for framework in ("lightning", "keras"):
        code, out = train(tmp_path, framework, f"trainer.framework={framework}", *DIVERGE)
        assert code == 1 and "Traceback" not in out, out
        summary = json.loads((tmp_path / framework / "summary.json").read_text())
        assert summary["status"] == "diverged" and f"at step {summary['step']};" in out, out
        steps[framework] = summary["step"]
        assert not (tmp_path / framework / "model.safetensors").exists()  # nothing diverged exported
        kept = latest_state(tmp_path / framework)
        assert kept is not None and summary["last_finite_state"] == str(kept)
        if framework == "keras":  # the kept state's weights are numbers
            assert all(np.isfinite(v).all() for v in load_file(kept).values() if v.dtype.kind == "f")
        code, out = zoo("resume", str(tmp_path / framework))
        assert code == 2 and "diverged at step" in out and "replays the same steps" in out, out
    assert steps["lightning"] == steps["keras"], steps


@pytest.fixture(scope="module")
def finished(trained_runs):
    """A finished one-epoch Lightning run (states kept), shared by the whole session: tests that
    write into it take their own copy (trained_runs.copy_run)."""
    # The request of every file that trains tiny() for one epoch; export.dir is the cache's own.
    return trained_runs.train(RECIPE, "lightning", tiny(Path("unused"), "trainer.max_epochs=1"))


def nan_copy(checkpoint, target):
    from safetensors import safe_open

    with safe_open(str(checkpoint), framework="np") as handle:
        metadata = handle.metadata()
    tensors = load_file(checkpoint)
    name = sorted(tensors)[0]
    tensors[name] = np.full_like(tensors[name], np.nan)
    save_file(tensors, str(target), metadata=metadata)
    return name


def test_a_checkpoint_of_nan_tensors_is_refused_with_exit_1(finished, tmp_path):
    bad = tmp_path / "nan.safetensors"
    name = nan_copy(finished.checkpoint, bad)
    code, out = zoo("evaluate", str(bad), "--recipe", str(RECIPE), "--set", "model.architecture=convnet-tiny")
    assert code == 1 and name in out and "NaN or infinite" in out and "Traceback" not in out, out
    code, out = zoo(
        "finetune", str(RECIPE), "--from", str(bad), *[a for o in tiny(tmp_path) for a in ("--set", o)]
    )
    assert code == 1 and name in out, out
    code, out = zoo("inspect", str(bad))  # looking at a diverged model stays possible
    assert code == 0, out


def test_writing_a_checkpoint_of_non_finite_tensors_is_refused(finished, tmp_path):
    from zoo.checkpoint.file import NonFiniteTensors
    from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint

    found = read_checkpoint(finished.checkpoint)
    tensors = found.tensors()
    tensors[next(iter(tensors))] = tensors[next(iter(tensors))] * np.inf
    with pytest.raises(NonFiniteTensors, match="the model diverged"):
        write_checkpoint(tmp_path / "x.safetensors", found.config, tensors, framework="imported")
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # truncated
        lambda data: b"PK\x03\x04" + b"\0" * 64,  # not a zip torch wrote
        lambda data: __import__("pickle").dumps({"state_dict": print}),  # a pickle with a callable
    ],
)
def test_a_tampered_training_state_is_named_not_torchs_traceback(finished, tmp_path, damage):
    run = copy_run(finished, tmp_path).run_dir
    state = latest_state(run)
    state.write_bytes(damage(state.read_bytes()))
    (run / "summary.json").unlink()  # a run stopped before its end: resume reads its state
    code, out = zoo("resume", str(run))
    assert code == 2 and f"{state}: not a usable training state" in out, out
    assert "weights_only" not in out and "Traceback" not in out, out


def test_an_edited_recipe_is_refused_unless_forced_and_metrics_keep_each_epoch_once(finished, tmp_path):
    run = copy_run(finished, tmp_path).run_dir
    recipe = (run / "recipe.yaml").read_text()
    (run / "recipe.yaml").write_text(recipe.replace("lr: 0.01", "lr: 0.02"))
    code, out = zoo("resume", str(run))
    assert code == 2 and "optimizer.lr: 0.01 -> 0.02" in out and "--force" in out, out
    # An epoch row written after the newest state (a kill between the two) is trained again:
    # resume drops it first, so every epoch stays once.
    lines = (run / "metrics.csv").read_text().splitlines()
    header, extra = lines[0].split(","), lines[-1].split(",")
    extra[header.index("step")] = "999999"
    (run / "metrics.csv").write_text("\n".join([*lines, ",".join(extra)]) + "\n")
    code, out = zoo("resume", str(run), "--force")
    assert code == 0, out
    epochs = [row["epoch"] for row in read_metrics(run / "metrics.csv")]
    assert epochs == sorted(set(epochs)), epochs


def test_a_second_resume_of_a_held_run_is_refused(finished, tmp_path):
    finished = copy_run(finished, tmp_path).run_dir  # the shared original stays unclaimed
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from zoo.runs import RunDir; from pathlib import Path; "
         f"RunDir(Path({str(finished)!r})).claim(); print('held', flush=True); import time; time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        code, out = zoo("resume", str(finished))
        assert code == 2 and f"is in use by zoo process {holder.pid}" in out, out
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)


def test_a_damaged_recipe_record_stops_a_resume_with_its_name(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / ".recipe.json").write_text("{")
    with pytest.raises(
        SetupError, match=r"\.recipe\.json is not JSON .*delete it to resume without the check"
    ):
        run.recipe_changes({"name": "x"})
    (tmp_path / ".recipe.json").write_text('{"model": ' + nested(MAX_DEPTH) + "}")
    with pytest.raises(SetupError, match="more than 100 levels deep"):
        run.recipe_changes({"name": "x"})
