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
import warm_zoo
from conftest import max_diff
from safetensors.numpy import load_file

from zoo.metrics_file import read_metrics
from zoo.runs.launch import free_ports

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
    done = warm_zoo.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    return load_file(tmp_path / name / "model.safetensors"), summary["metrics"]


def epoch_metrics(run_dir) -> list[dict[str, float]]:
    rows = read_metrics(run_dir / "metrics.csv")
    return [{k: float(v) for k, v in row.items() if k.startswith(("train_", "val_"))} for row in rows]


@pytest.mark.parametrize(
    ("framework", "strategy"), [("lightning", "ddp"), ("keras", "mirrored"), ("keras", "ddp")]
)
def test_two_replicas_match_one_device(recipe, tmp_path, framework, strategy):
    single, one = train(recipe, tmp_path, "single", f"trainer.framework={framework}")
    parallel, two = train(
        recipe, tmp_path, "parallel", f"trainer.framework={framework}", f"trainer.strategy={strategy}",
        "trainer.devices=2",
    )  # fmt: skip
    assert (one["replicas"], two["replicas"]) == (1, 2)
    assert single.keys() == parallel.keys()
    worst = max(max_diff(single[k], parallel[k]) for k in single)
    assert worst <= 1e-5
    # Epoch and test metrics are means over every batch of every replica.
    assert two["test_accuracy"] == pytest.approx(one["test_accuracy"], abs=1e-6)
    assert two["test_loss"] == pytest.approx(one["test_loss"], rel=1e-5)
    alone, shared = epoch_metrics(tmp_path / "single"), epoch_metrics(tmp_path / "parallel")
    assert len(alone) == len(shared) == 2
    for epoch_alone, epoch_shared in zip(alone, shared, strict=True):
        assert epoch_shared == pytest.approx(epoch_alone, rel=1e-5)
    assert not (tmp_path / "parallel-2").exists(), "the second rank must not create a run folder"


def launch_nodes(recipe, tmp_path, name, framework, node_env) -> list[subprocess.CompletedProcess]:
    """Start one ``zoo train`` per node on this machine, the way a cluster launcher would."""
    command = [sys.executable, "-m", "zoo.cli", "train", str(recipe), "--set", f"export.dir={tmp_path}",
               "--set", f"export.run_name={name}", "--set", f"trainer.framework={framework}",
               "--set", "trainer.num_nodes=2"]  # fmt: skip
    base = {**os.environ, "ZOO_DDP_TIMEOUT_S": "60", "TF_CPP_MIN_LOG_LEVEL": "2"}
    nodes = [
        subprocess.Popen(
            command, env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for env in node_env
    ]
    try:
        return [subprocess.CompletedProcess(n.args, n.wait(timeout=240), *n.communicate()) for n in nodes]
    finally:
        for node in nodes:  # never leave a worker behind, whatever happened
            if node.poll() is None:
                node.kill()
                node.wait()


def test_keras_multi_worker_mirrored_with_two_local_workers(recipe, tmp_path):
    single, _ = train(recipe, tmp_path, "single", "trainer.framework=keras")
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    node_env = [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
                for i in range(2)]  # fmt: skip
    for done in launch_nodes(recipe, tmp_path, "workers", "keras", node_env):
        assert done.returncode == 0, done.stderr[-3000:]
    workers = load_file(tmp_path / "workers" / "model.safetensors")
    assert json.loads((tmp_path / "workers" / "summary.json").read_text())["metrics"]["replicas"] == 2
    assert max(max_diff(single[k], workers[k]) for k in single) <= 1e-5


def test_lightning_two_nodes_as_under_torchrun(recipe, tmp_path):
    single, _ = train(recipe, tmp_path, "single", "trainer.framework=lightning")
    (port,) = free_ports(1)
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    node_env = [{**common, "NODE_RANK": str(i), "RANK": str(i)} for i in range(2)]
    for done in launch_nodes(recipe, tmp_path, "nodes", "lightning", node_env):
        assert done.returncode == 0, done.stderr[-3000:]
    nodes = load_file(tmp_path / "nodes" / "model.safetensors")
    assert json.loads((tmp_path / "nodes" / "summary.json").read_text())["metrics"]["replicas"] == 2
    assert max(max_diff(single[k], nodes[k]) for k in single) <= 1e-5


LANGUAGE_RECIPE = """
model: {architecture: transformer-tiny}
data: {name: text, path: %s, seq_len: 16, batch_size: 32}
optimizer: {name: sgd, lr: 0.5}
trainer: {max_epochs: 1, progress_bar: false, seed: 3, num_threads: 1, framework: keras}
"""


def test_two_keras_replicas_match_one_device_on_token_losses(tmp_path):
    """The token loss (padding and masked tokens skipped) under MirroredStrategy: a loss that
    Keras does not reduce itself is not divided by the replicas, and SGD then steps twice as
    far on two (Adam would hide it); the logged loss must also be the mean, not the sum."""
    text = tmp_path / "text.txt"
    text.write_text("def train(recipe, framework):\n    return zoo.train(recipe)\n" * 40)
    recipe = tmp_path / "lm.yaml"
    recipe.write_text(LANGUAGE_RECIPE % text)
    single, one = train(recipe, tmp_path, "single")
    parallel, two = train(recipe, tmp_path, "parallel", "trainer.strategy=mirrored", "trainer.devices=2")
    assert max(max_diff(single[k], parallel[k]) for k in single) <= 1e-5
    assert two["test_loss"] == pytest.approx(one["test_loss"], rel=1e-5)
    (row,) = epoch_metrics(tmp_path / "parallel")
    assert row["train_loss"] == pytest.approx(row["train_bpc"] * 0.6931471805599453, rel=1e-5)
