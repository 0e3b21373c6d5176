"""Shared fixtures. Frameworks are imported lazily, and threads are fixed so float results repeat."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from zoo import registry

ALL_NAMES = registry.names()


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def tmp_checkpoints(tmp_path, monkeypatch):
    """Runs write under a temporary folder, never into the repository."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def parity_config(name: str, **overrides):
    """The registry entry's config with dropout off, so train-mode outputs are comparable."""
    config = registry.resolve_config(name)
    fields = {k: 0.0 for k in type(config).model_fields if "dropout" in k}
    return registry.resolve_config(name, **{**fields, **overrides})


def max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))
