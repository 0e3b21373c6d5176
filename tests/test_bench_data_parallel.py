"""bench/data_parallel.py --quick: 2 replicas against 1 in both frameworks (DDP over 2 gloo
processes, MirroredStrategy over 2 logical CPUs) report a throughput and the single-device
run's results (convnet-tiny, SGD, every batch split evenly: rounding apart, the same run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# Measured 5e-6 (two epochs of SGD, lr 0.2, momentum 0.9): rounding of two half-batch means
# against one whole-batch mean. An unevenly split batch or a loss not divided by the replicas
# gives 1e-2 or more.
WEIGHT_TOLERANCE = 1e-4
LOSS_TOLERANCE = 1e-5


def test_quick_mode_two_replicas_match_one(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "bench" / "data_parallel.py"), "--quick", "--json"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    entries = {e["mode"]: e for e in map(json.loads, done.stdout.strip().splitlines())}
    assert set(entries) == {"lightning 1x1", "lightning ddp", "keras 1x1", "keras mirrored"}
    for mode, entry in entries.items():
        assert entry["replicas"] == (1 if mode.endswith("1x1") else 2)
        assert entry["even"], "the quick preset must split every batch evenly"
        assert entry["samples"] == 640 and entry["samples_per_s"] > 0
        assert entry["ratio"] > 0
        if mode.endswith("1x1"):
            assert entry["ratio"] == pytest.approx(1) and entry["max_abs_weight_diff"] == 0
        else:
            assert entry["max_abs_weight_diff"] <= WEIGHT_TOLERANCE, entry
            assert entry["train_loss_diff"] <= LOSS_TOLERANCE
            assert entry["test_loss_diff"] <= LOSS_TOLERANCE
