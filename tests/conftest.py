"""Shared fixtures. Frameworks are imported lazily, and threads are fixed so float results repeat."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from zoo import registry

ALL_NAMES = registry.names()
# Entries up to this many parameters go through the tests that build, save and run every entry.
# Above it (gpt2 124M, bert-base 109M, gpt2-medium 355M) a round trip costs 10-35 s and repeats
# code a smaller preset of the family runs; each family's reference tests build those in full.
BUILD_LIMIT = 100_000_000
BUILT_NAMES = [e.name for e in registry.list_architectures() if e.parameters <= BUILD_LIMIT]
RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
FRAMEWORKS = ["lightning", "keras"]


def tiny(tmp_path, *overrides):
    """Overrides that turn the default recipe into a seconds-long run writing under tmp_path."""
    return [
        "model.architecture=convnet-tiny", "trainer.max_epochs=2", "trainer.progress_bar=false",
        "data.batch_size=64", "optimizer.lr=0.01", f"export.dir={tmp_path}", *overrides,
    ]  # fmt: skip


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def tmp_checkpoints(tmp_path, monkeypatch):
    """Runs write under a temporary folder, never into the repository."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


SMALL_IMAGE = 32


def parity_config(name: str, **overrides):
    """The registry entry's config with dropout off, so train-mode outputs are comparable,
    and at 32x32 where its default image is larger (ImageNet's 224): the tests check the
    mapping and the arithmetic, which a smaller image exercises just as well."""
    config = registry.resolve_config(name)
    fields = {k: 0.0 for k in type(config).model_fields if "dropout" in k}
    return registry.resolve_config(name, **{**fields, **small_input(config), **overrides})


def small_input(config) -> dict:
    """``{"image_size": 32}`` for a config whose data-decided image size is larger and that
    is valid at 32; ``{}`` otherwise."""
    if "image_size" not in config.DATA_FIELDS or config.image_size <= SMALL_IMAGE:
        return {}
    try:
        type(config).model_validate({**config.model_dump(), "image_size": SMALL_IMAGE})
    except ValueError:
        return {}
    return {"image_size": SMALL_IMAGE}


def twins(name: str, tensors: dict[str, np.ndarray] | None = None, **fields):
    """(config, torch twin, Keras twin) of a preset or family with ``fields``, both holding
    ``tensors`` (default: the torch twin's init after ``torch.manual_seed(0)``)."""
    import torch

    from zoo.checkpoint import load_tensors, model_tensors

    config = registry.resolve_config(name, **fields)
    family = registry.get_family(name)
    torch.manual_seed(0)
    torch_model = family.build_torch(config)
    keras_model = family.build_keras(config)
    tensors = model_tensors(torch_model) if tensors is None else tensors
    load_tensors(torch_model, tensors)
    load_tensors(keras_model, tensors)
    return config, torch_model, keras_model


def forward_torch(model, x: np.ndarray, training: bool) -> np.ndarray:
    """A torch twin's output for a canonical-layout input, in train or eval mode."""
    import torch

    model.train(training)
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def forward_keras(model, x: np.ndarray, family, training: bool) -> np.ndarray:
    """A Keras twin's output for the same canonical-layout input."""
    from zoo.keras.data import keras_layout

    return np.asarray(model(keras_layout(x, family.input_kind), training=training))


def relative_error(got, expected) -> float:
    """max |got - expected| / max |expected|: the norm of the reference-implementation tests."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


@pytest.fixture(scope="session")
def even_npz(tmp_path_factory):
    """8x8 'images', 4 classes; 256 training samples = 4 full batches of 64, so batches split
    evenly across replicas and into micro-batches."""
    root = tmp_path_factory.mktemp("npz")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(320, 8, 8)).astype(np.float32)
    y = (x[:, :4].mean(axis=(1, 2)) > 0).astype(np.int64) + 2 * (x[:, 4:].mean(axis=(1, 2)) > 0)
    path = root / "data.npz"
    np.savez(path, x_train=x[:256], y_train=y[:256], x_val=x[256:], y_val=y[256:],
             x_test=x[256:], y_test=y[256:])  # fmt: skip
    return path
