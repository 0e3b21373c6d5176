"""Data parallelism on CPU: Lightning DDP over 2 processes and Keras MirroredStrategy over 2
logical CPUs end with the weights of the single-device run (SGD, no BatchNorm).

Each run is a fresh ``zoo train`` process: DDP re-launches its script, and TensorFlow
takes its device layout only before its runtime starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import max_diff
from safetensors.numpy import load_file

pytestmark = pytest.mark.slow

RECIPE = """
model: {architecture: convnet-tiny}
data: {name: npz, path: %s, batch_size: 64, eval_batch_size: 64}
optimizer: {name: sgd, lr: 0.2, momentum: 0.9}
trainer: {max_epochs: 2, progress_bar: false, seed: 3, num_threads: 1}
"""


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, even_npz):
    path = tmp_path_factory.mktemp("dp") / "recipe.yaml"
    path.write_text(RECIPE % even_npz)
    return path


def train(recipe, tmp_path, name, *overrides):
    env = {**os.environ, "ZOO_DDP_TIMEOUT_S": "60", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "zoo.cli", "train", str(recipe), "--set", f"export.dir={tmp_path}",
               "--set", f"export.run_name={name}", *(a for o in overrides for a in ("--set", o))]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    return load_file(tmp_path / name / "model.safetensors"), summary["metrics"]["replicas"]


@pytest.mark.parametrize(
    ("framework", "strategy"), [("lightning", "ddp"), ("keras", "mirrored"), ("keras", "ddp")]
)
def test_two_replicas_match_one_device(recipe, tmp_path, framework, strategy):
    single, one = train(recipe, tmp_path, "single", f"trainer.framework={framework}")
    parallel, two = train(
        recipe, tmp_path, "parallel", f"trainer.framework={framework}", f"trainer.strategy={strategy}",
        "trainer.devices=2",
    )  # fmt: skip
    assert (one, two) == (1, 2)
    assert single.keys() == parallel.keys()
    worst = max(max_diff(single[k], parallel[k]) for k in single)
    assert worst <= 1e-5
    assert not (tmp_path / "parallel-2").exists(), "the second rank must not create a run folder"
