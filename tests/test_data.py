"""Data: the fixed split, and the one batch order both frameworks consume."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from zoo.data import epoch_batches, load_dataset
from zoo.data.digits import digits_split
from zoo.recipe import Constant, Cosine, DigitsData, NpzData, Step
from zoo.schedule import lr_table


def test_digits_split_is_fixed_stratified_and_disjoint():
    data = load_dataset(DigitsData(), "image")
    assert (len(data.train), len(data.val), len(data.test)) == (1257, 180, 360)
    assert data.train.x.shape[1:] == (1, 8, 8) and data.train.x.dtype == np.float32
    assert data.train.x.min() >= 0.0 and data.train.x.max() <= 1.0
    assert data.info == {"task": "classification", "in_channels": 1, "image_size": 8, "num_classes": 10}
    counts = np.bincount(data.test.y)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: ~36 of each digit
    again = load_dataset(DigitsData(), "sequence")
    np.testing.assert_array_equal(again.test.x, data.test.x[:, 0])
    assert again.info == {"task": "classification", "input_size": 8, "num_classes": 10}


READ_CACHED = """
import sys
from zoo.data.digits import digits_split
images, labels, (train, val, test) = digits_split(0.25, 0.0, 3)
print([m for m in sys.modules if m.startswith("sklearn")], test[:5].tolist())
"""


def test_the_cached_digits_split_is_scikit_learns_and_is_read_without_it(tmp_path, monkeypatch):
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    _, _, (train, val, test) = digits_split(0.25, 0.0, 3)  # drawn by scikit-learn, then kept
    assert len(list((tmp_path / "digits").glob("split-*.npz"))) == 1
    bunch = sklearn_digits()
    index = np.arange(len(bunch.target))
    rest, expected = train_test_split(index, test_size=0.25, stratify=bunch.target, random_state=3)
    np.testing.assert_array_equal(test, expected)
    np.testing.assert_array_equal(train, rest)
    assert len(val) == 0
    read = subprocess.run([sys.executable, "-c", READ_CACHED], env={"ZOO_CACHE": str(tmp_path)},
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert read.stdout.strip() == f"[] {expected[:5].tolist()}"  # the cached split, no scikit-learn
    cached = digits_split(0.25, 0.0, 3)
    np.testing.assert_array_equal(cached[0], bunch.images)
    np.testing.assert_array_equal(cached[1], bunch.target)


def test_batch_order_depends_on_seed_and_epoch_only():
    first = epoch_batches(100, 32, seed=3, epoch=1)
    assert [len(b) for b in first] == [32, 32, 32, 4]
    assert sorted(np.concatenate(first)) == list(range(100))
    np.testing.assert_array_equal(np.concatenate(first), np.concatenate(epoch_batches(100, 32, 3, 1)))
    assert not np.array_equal(np.concatenate(first), np.concatenate(epoch_batches(100, 32, 3, 2)))


def test_torch_and_keras_pipelines_yield_identical_batches():
    from zoo.keras.data import train_dataset
    from zoo.lightning.data import loader

    data = load_dataset(DigitsData(), "image")
    torch_loader = loader(data.train, 100, seed=7, shuffle=True)
    keras_batches = iter(train_dataset(data.train, 100, seed=7, shuffle=True, epochs=2, input_kind="image"))
    for epoch in range(2):
        torch_loader.sampler.set_epoch(epoch)  # what Lightning does each epoch
        for x_t, y_t in torch_loader:
            x_k, y_k = next(keras_batches)
            np.testing.assert_array_equal(y_t.numpy(), y_k.numpy())
            np.testing.assert_array_equal(x_t.numpy().transpose(0, 2, 3, 1), x_k.numpy())
    with pytest.raises(StopIteration):
        next(keras_batches)


def test_lr_tables():
    table = lr_table(Cosine(warmup_steps=10, min_lr_ratio=0.1), 1.0, steps_per_epoch=10, epochs=10)
    assert len(table) == 100
    np.testing.assert_allclose(table[:10], np.arange(1, 11) / 10, rtol=1e-6)
    assert table[10] == pytest.approx(1.0) and table[-1] == pytest.approx(0.1, abs=1e-3)
    assert np.all(np.diff(table[10:]) <= 0)
    step = lr_table(Step(step_epochs=2, gamma=0.5), 0.4, steps_per_epoch=3, epochs=5)
    np.testing.assert_allclose(step, [0.4] * 6 + [0.2] * 6 + [0.1] * 3, rtol=1e-6)
    np.testing.assert_array_equal(lr_table(Constant(), 0.3, 4, 2), np.full(8, 0.3))


def test_both_frameworks_read_the_same_rates():
    import torch

    from zoo.keras.optimizers import TableSchedule
    from zoo.lightning.optim import build_scheduler

    table = lr_table(Cosine(warmup_steps=5), 0.01, steps_per_epoch=7, epochs=3)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    scheduler = build_scheduler(optimizer, table, 0.01)
    torch_rates = []
    for _ in table:
        torch_rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    keras_rates = [float(TableSchedule(table)(step)) for step in range(len(table))]
    np.testing.assert_allclose(torch_rates, table, rtol=1e-6)
    np.testing.assert_allclose(keras_rates, table, rtol=1e-6)
    # The very doubles: LambdaLR multiplies the base rate by the factor, Keras reads the table.
    assert torch_rates == [0.01 * (float(v) / 0.01) for v in table] and keras_rates == table.tolist()


def test_npz_data(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "d.npz"
    np.savez(path, x_train=rng.normal(size=(50, 12, 12)), y_train=rng.integers(0, 3, 50),
             x_test=rng.normal(size=(10, 12, 12)), y_test=rng.integers(0, 3, 10))  # fmt: skip
    data = load_dataset(NpzData(path=path, val_fraction=0.2), "image")
    assert (len(data.train), len(data.val), len(data.test)) == (40, 10, 10)
    assert data.info == {"task": "classification", "in_channels": 1, "image_size": 12, "num_classes": 3}


def test_npz_errors_name_the_problem(tmp_path):
    from zoo.data import DataError

    path = tmp_path / "d.npz"
    np.savez(path, x_train=np.zeros((4, 3, 3)), y_train=np.zeros(4, int))
    with pytest.raises(DataError, match=r"missing arrays \['x_test', 'y_test'\]"):
        load_dataset(NpzData(path=path), "image")
    np.savez(path, x_train=np.zeros((4, 3, 5)), y_train=np.zeros(4, int), x_test=np.zeros((2, 3, 5)),
             y_test=np.zeros(2, int))  # fmt: skip
    with pytest.raises(DataError, match=r"images must be \(N, H, W\) or \(N, C, H, W\) with H == W"):
        load_dataset(NpzData(path=path), "image")
    np.savez(path, x_train=np.zeros(4, dtype=object), y_train=np.zeros(4, int))
    with pytest.raises(DataError, match=r"not a readable \.npz without pickles"):
        load_dataset(NpzData(path=path), "image")
