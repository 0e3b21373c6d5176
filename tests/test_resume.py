"""A run killed with SIGKILL mid-epoch resumes to the very weights of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from zoo.checkpoint.state import states

pytestmark = pytest.mark.slow
RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
SETTINGS = [
    "model.architecture=convnet-tiny", "model.dropout=0.3", "trainer.max_epochs=3",
    "trainer.progress_bar=false", "trainer.deterministic=true", "trainer.num_threads=1",
    "data.batch_size=64", "export.state_every_n_steps=6",
]  # fmt: skip


def command(tmp_path, framework, name, *verb):
    sets = [a for s in [*SETTINGS, f"export.dir={tmp_path}", f"export.run_name={name}"] for a in ("--set", s)]
    return [
        sys.executable,
        "-m",
        "zoo.cli",
        *(verb or ("train", str(RECIPE))),
        "--framework",
        framework,
        *sets,
    ]


def run(args, **kw):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_sigkill_mid_epoch_then_resume_gives_identical_weights(tmp_path, framework):
    done = run(command(tmp_path, framework, "whole"))
    assert done.returncode == 0, done.stderr[-2000:]

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    victim = subprocess.Popen(command(tmp_path, framework, "killed"), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    run_dir = tmp_path / "killed"
    deadline = time.monotonic() + 240
    # 20 batches an epoch: step 30 is mid-epoch 2. Kill as soon as it is saved.
    while not any(p.name.startswith("step-000000030") for p in states(run_dir)):
        assert victim.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not (run_dir / "model.safetensors").exists()

    resumed = run([sys.executable, "-m", "zoo.cli", "resume", str(run_dir)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stderr
    whole, killed = (
        load_file(tmp_path / "whole" / "model.safetensors"),
        load_file(run_dir / "model.safetensors"),
    )
    assert whole.keys() == killed.keys()
    assert all(np.array_equal(whole[k], killed[k]) for k in whole), "resumed weights differ"
    assert len(states(run_dir)) <= 2  # export.keep_states
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,step") and rows[-1].startswith("3,60,")


def test_resume_needs_a_run_folder_with_a_state(tmp_path):
    done = run([sys.executable, "-m", "zoo.cli", "resume", str(tmp_path)])
    assert done.returncode == 2 and "not a zoo run folder (no recipe.yaml)" in done.stderr
    (tmp_path / "recipe.yaml").write_text("model: {architecture: cnn}\n")
    done = run([sys.executable, "-m", "zoo.cli", "resume", str(tmp_path)])
    assert done.returncode == 2 and "has no saved training state" in done.stderr
