"""Runs stopped while they train: SIGTERM (preemption) and Ctrl-C save the state where the run
stops and exit 143 and 130, resumed bit-exactly, and a second Ctrl-C stops at once; a run folder
deleted during training stops the run; and a loss that explodes while staying finite is reported
(beside the signals: it compares with the same uninterrupted runs).

Signals are sent by the training process to itself at a chosen batch end (``SIGNAL_AT`` wraps
the CLI): where the run stops never depends on how fast the machine is.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import warm_zoo
from cli_helpers import sets, zoo
from conftest import FRAMEWORKS, RECIPE, tiny
from safetensors.numpy import load_file

from zoo.checkpoint.state import latest_state, step_of
from zoo.metrics_file import read_metrics
from zoo.runs import next_commands, read_run
from zoo.runs.growth import GROWTH_LIMIT, LOSS_FLOOR, loss_explosion

# 1,257 training digits in batches of 128: 10 batches an epoch, 20 in the run.
SETTINGS = [
    "model.architecture=convnet-tiny", "model.dropout=0.3", "trainer.max_epochs=2",
    "trainer.progress_bar=false", "trainer.deterministic=true", "trainer.num_threads=1",
    "data.batch_size=128",
]  # fmt: skip
BATCHES = 10


# The zoo command line, with the process sending itself a signal at the end of its ``count``-th
# training batch (``train``) or validation batch (``val``), after zoo's per-batch callback ran:
# a real signal through the real handlers, at a point that never depends on the machine's speed.
# The zoo command line, with the process sending itself a signal at the end of its ``count``-th
# training batch (``train``) or validation batch (``val``), after zoo's per-batch callback ran:
# a real signal through the real handlers, at a point that never depends on the machine's speed.
SIGNAL_AT = """
import os, signal, sys

framework, hook, count, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# Ctrl-C in a terminal: Python's own handler, even where the suite was started in the background
# (a shell's `cmd &` starts it with SIGINT ignored, which every child would inherit).
signal.signal(signal.SIGINT, signal.default_int_handler)
if framework == "lightning":
    from zoo.lightning import callbacks
    method = {"train": "on_train_batch_end", "val": "on_validation_batch_end"}[hook]
else:
    from zoo.keras import callbacks
    method = {"train": "on_train_batch_end", "val": "on_test_batch_end"}[hook]
original = getattr(callbacks.StopOnNonFiniteLoss, method)
seen = []


def hooked(self, *args, **kwargs):
    original(self, *args, **kwargs)
    seen.append(1)
    if len(seen) == count:  # "SIGINT,SIGINT": twice; "group-SIGINT": the whole group, as a terminal does
        for one in name.split(","):
            if one.startswith("group-"):
                os.killpg(os.getpgrp(), getattr(signal, one[6:]))
            else:
                os.kill(os.getpid(), getattr(signal, one))


setattr(callbacks.StopOnNonFiniteLoss, method, hooked)
from zoo.cli import main

main(args=sys.argv[5:], prog_name="zoo")
"""


def signalled(
    tmp_path: Path, framework: str, count: int, name: str, hook: str = "train", *overrides: str,
    recipe: Path = RECIPE, settings: list[str] = SETTINGS,
) -> tuple[subprocess.CompletedProcess, Path]:  # fmt: skip
    """A ``zoo train`` of ``settings`` that receives signal ``name`` at its ``count``-th ``hook``
    batch end, in a process group of its own (a group signal reaches its workers, not pytest)."""
    script = tmp_path / "signal_at.py"
    script.write_text(textwrap.dedent(SIGNAL_AT))
    run = tmp_path / f"{framework}-{name.replace(',', '+')}-{hook}-{count}"
    where = [f"export.dir={tmp_path}", f"export.run_name={run.name}"]
    args = ["train", str(recipe), "--framework", framework, *sets(*settings, *overrides, *where)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = warm_zoo.run(
        [sys.executable, str(script), framework, hook, str(count), name, *args],
        env=env, capture_output=True, text=True, timeout=600, start_new_session=True,
    )  # fmt: skip
    return done, run


# How each signal's stop is said: exit status, the stop's words, the end line.
STOPS = {
    "SIGTERM": (143, "SIGTERM", "training stopped: the run received SIGTERM"),
    "SIGINT": (130, "Ctrl-C (SIGINT)", "training stopped: the run received Ctrl-C (SIGINT)"),
}


def stopped_on_sigterm(
    done: subprocess.CompletedProcess, run: Path, step: int, name: str = "SIGTERM"
) -> None:
    """Exit 143 (130 for SIGINT), the newest state at ``step``, said on stderr and in
    summary.json, no checkpoint."""
    status, said, end = STOPS[name]
    assert done.returncode == status, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    state = latest_state(run)
    assert state is not None and step_of(state) == step, state
    expected = f"the run stopped on {said}; its last training state is kept (state/{state.name}, step {step})"
    assert expected in done.stderr and f"zoo resume {run}" in done.stderr, done.stderr[-3000:]
    assert end in done.stderr and "Aborted!" not in done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary == {"status": "interrupted", "signal": name, "last_state": str(state), "step": step}
    assert (
        read_run(run).status == "interrupted"
        and next_commands(read_run(run))["resume"] == f"zoo resume {run}"
    )
    assert not (run / "model.safetensors").exists()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run each signalled run must end as, trained once per framework."""
    root, found = tmp_path_factory.mktemp("whole"), {}

    def run(framework: str) -> Path:
        if framework not in found:
            args = sets(*SETTINGS, f"export.dir={root}", f"export.run_name={framework}")
            code, out = zoo("train", str(RECIPE), "--framework", framework, *args)
            assert code == 0, out
            found[framework] = root / framework
        return found[framework]

    return run


def rows_without_time(run: Path) -> list[dict[str, str]]:
    return [
        {k: v for k, v in row.items() if k != "epoch_seconds"} for row in read_metrics(run / "metrics.csv")
    ]


@pytest.mark.slow  # a training process per framework and case (TensorFlow's import alone is seconds)
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(
    "batch, name",
    [(7, "SIGTERM"), (BATCHES, "SIGTERM"), (BATCHES + 5, "SIGINT")],
    ids=["mid-epoch", "epoch-end", "ctrl-c-mid-epoch"],
)
def test_sigterm_and_ctrl_c_save_the_state_and_resume_is_bit_exact(
    tmp_path, framework, batch, name, uninterrupted
):
    done, run = signalled(tmp_path, framework, batch, name)
    # Mid-epoch it stops after that optimizer step; in an epoch's last step, after the epoch's
    # validation, metrics row and state. Ctrl-C stops as SIGTERM does (it used to lose the epoch).
    stopped_on_sigterm(done, run, batch, name)
    assert [row["epoch"] for row in read_metrics(run / "metrics.csv")] == ["1"] * (batch >= BATCHES)
    assert ("Ctrl-C again stops at once" in done.stderr) == (name == "SIGINT")

    code, out = zoo("resume", str(run))
    assert code == 0, out
    whole = uninterrupted(framework)
    expected, resumed = load_file(whole / "model.safetensors"), load_file(run / "model.safetensors")
    assert expected.keys() == resumed.keys()
    assert all(np.array_equal(expected[k], resumed[k]) for k in expected), "resumed weights differ"
    assert rows_without_time(run) == rows_without_time(whole)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and "loss_exploded" not in summary
    # The first batch's loss travelled in the state: the explosion check still has it.
    first = json.loads((whole / "summary.json").read_text())["metrics"]["train_loss_first_batch"]
    assert summary["metrics"]["train_loss_first_batch"] == first


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(
    "hook, count, overrides, step, rows",
    [("val", 1, (), BATCHES, 1), ("train", 7, ("trainer.accumulate_grad_batches=2",), 4, 0)],
    ids=["validating", "accumulating"],
)
def test_sigterm_lets_a_validating_epoch_or_an_accumulated_step_end_first(
    tmp_path, framework, hook, count, overrides, step, rows
):
    done, run = signalled(tmp_path, framework, count, "SIGTERM", hook, *overrides)
    stopped_on_sigterm(done, run, step)
    assert len(read_metrics(run / "metrics.csv")) == rows


STREAM_RECIPE = """
model: {architecture: transformer-tiny, dropout: 0.2}
data: {name: stream, path: corpus, seq_len: 16, batch_size: 32, bpe_vocab_size: 300, shuffle_buffer: 40,
       workers: 2}
optimizer: {name: adamw, lr: 0.003}
trainer: {max_epochs: 2, progress_bar: false, seed: 5, num_threads: 1, deterministic: true}
"""


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_ctrl_c_at_a_terminal_saves_a_streamed_run_mid_epoch_and_resume_is_bit_exact(
    tmp_path, framework, monkeypatch
):
    """The issue's case: Ctrl-C in the middle of a streamed epoch kept nothing of it. A terminal
    sends SIGINT to the whole process group, the DataLoader workers included."""
    from stream_corpus import write_corpus

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # data.path is relative, as a user's is
    write_corpus(tmp_path / "corpus", [120, 90, 100], kinds=("jsonl", "parquet"))
    recipe = tmp_path / "lm.yaml"
    recipe.write_text(STREAM_RECIPE)
    code, out = zoo("train", str(recipe), "--framework", framework,
                    *sets(f"export.dir={tmp_path}", "export.run_name=whole"))  # fmt: skip
    assert code == 0, out
    steps = int(read_metrics(tmp_path / "whole" / "metrics.csv")[0]["step"])
    assert steps > 4  # the signal comes mid-epoch
    done, run = signalled(tmp_path, framework, 3, "group-SIGINT", recipe=recipe, settings=[])
    stopped_on_sigterm(done, run, 3, "SIGINT")
    assert done.stderr.count("Ctrl-C again stops at once") == 1  # said by the training process alone
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the run's recipe keeps data.path absolute
    code, out = zoo("resume", str(run))
    assert code == 0, out
    expected, resumed = (
        load_file(tmp_path / "whole" / "model.safetensors"),
        load_file(run / "model.safetensors"),
    )
    assert all(np.array_equal(expected[k], resumed[k]) for k in expected), "resumed weights differ"
    assert rows_without_time(run) == rows_without_time(tmp_path / "whole")


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_second_ctrl_c_stops_at_once_keeping_the_state_before(tmp_path, framework):
    done, run = signalled(tmp_path, framework, BATCHES + 5, "SIGINT,SIGINT")
    # The step in progress is not waited for: the state kept is the epoch end's.
    stopped_on_sigterm(done, run, BATCHES, "SIGINT")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_run_folder_deleted_during_training_stops_the_run(tmp_path, framework, monkeypatch):
    module = "zoo.lightning.callbacks" if framework == "lightning" else "zoo.keras.callbacks"
    callbacks = __import__(module, fromlist=["StopOnNonFiniteLoss"])
    original, run = callbacks.StopOnNonFiniteLoss.on_train_batch_end, tmp_path / "doomed"

    def remove_at_batch_3(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if run.exists() and len(read_metrics(run / "metrics.csv")) == 0 and self.last_finite[0] == 3:
            shutil.rmtree(run)

    monkeypatch.setattr(callbacks.StopOnNonFiniteLoss, "on_train_batch_end", remove_at_batch_3)
    code, out = zoo("train", str(RECIPE), "--framework", framework,
                    *sets(*SETTINGS, f"export.dir={tmp_path}", "export.run_name=doomed"))  # fmt: skip
    assert code == 1, out
    assert f"the run folder {run} was deleted or moved away while the run trained" in out, out
    assert not run.exists(), sorted(p.name for p in run.rglob("*"))  # nothing recreated in its place


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_finite_explosion_of_the_loss_is_reported(tmp_path, framework, caplog, uninterrupted):
    overrides = tiny(tmp_path, "export.run_name=boom", "trainer.max_epochs=1", "optimizer.lr=1e6")
    code, out = zoo("train", str(RECIPE), "--framework", framework, *sets(*overrides))
    assert code == 0, out  # it finished: its checkpoint holds numbers, worth nothing
    summary = json.loads((tmp_path / "boom" / "summary.json").read_text())
    exploded = summary["loss_exploded"]
    assert exploded["factor"] > GROWTH_LIMIT and exploded["last_epoch_loss"] > LOSS_FLOOR
    assert exploded["first_batch_loss"] == summary["metrics"]["train_loss_first_batch"]
    assert math.isclose(
        exploded["last_epoch_loss"], float(read_metrics(tmp_path / "boom" / "metrics.csv")[-1]["train_loss"])
    )
    (warning,) = [r.getMessage() for r in caplog.records if "the training loss exploded" in r.getMessage()]
    assert f"{exploded['factor']:.3g} times" in warning and "lower optimizer.lr" in warning
    # A run that trains is not reported; its first batch is the untrained model's: ln(10) for ten digits.
    whole = json.loads((uninterrupted(framework) / "summary.json").read_text())
    assert "loss_exploded" not in whole
    assert abs(whole["metrics"]["train_loss_first_batch"] - math.log(10)) < 0.1


def test_the_explosion_rule_at_its_edges():
    rows = [{"epoch": "1", "train_loss": "5.0"}, {"epoch": "2", "train_loss": str(GROWTH_LIMIT * 0.5)}]
    assert loss_explosion(0.5, rows) is None  # exactly GROWTH_LIMIT times: not more
    rows[-1]["train_loss"] = str(GROWTH_LIMIT * 0.5 * 1.001)
    assert loss_explosion(0.5, rows)["epoch"] == 2
    assert loss_explosion(0.001, [{"epoch": "1", "train_loss": str(LOSS_FLOOR)}]) is None  # tiny losses
    assert loss_explosion(None, rows) is None  # resumed from a state without the first loss
    assert loss_explosion(0.5, [*rows, {"epoch": "3", "train_loss": ""}])["epoch"] == 2  # an empty cell
    assert loss_explosion(0.5, [{"epoch": "1", "train_loss": "nan"}]) is None  # NaN stops runs itself
