"""``trainer.label_smoothing``: one formula in both frameworks, torch's own.

torch's ``F.cross_entropy(label_smoothing=s)`` is the reference. Keras' SparseCategoricalCrossentropy
has no label smoothing for sparse labels, so zoo.keras.losses computes the same formula itself; the
token losses count no ``IGNORE_INDEX`` label, smoothed or not. Random logits, a wide spread of
values and ignored labels included; agreement within 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from zoo.data import IGNORE_INDEX
from zoo.keras import losses as keras_losses
from zoo.lightning import task as lightning_task
from zoo.lightning.task import ClassificationTask, LanguageModelTask, TokenTask
from zoo.recipe import RecipeError, load_recipe

SMOOTHING = (0.0, 0.1, 0.35)


def random_case(shape: tuple[int, ...], classes: int, seed: int, ignored: float = 0.3):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(*shape, classes)) * rng.uniform(0.5, 6)).astype(np.float32)
    labels = rng.integers(0, classes, size=shape).astype(np.int64)
    labels[rng.random(shape) < ignored] = IGNORE_INDEX
    return logits, labels


@pytest.mark.parametrize("smoothing", SMOOTHING)
def test_token_losses_are_torchs_cross_entropy(smoothing):
    logits, labels = random_case((3, 11), classes=17, seed=int(smoothing * 100))
    reference = F.cross_entropy(
        torch.from_numpy(logits).reshape(-1, 17), torch.from_numpy(labels).reshape(-1),
        ignore_index=IGNORE_INDEX, label_smoothing=smoothing,
    ).item()  # fmt: skip
    torch_side = lightning_task.token_cross_entropy(
        torch.from_numpy(logits), torch.from_numpy(labels), smoothing
    )
    keras_side = keras_losses.token_cross_entropy(labels, logits, smoothing)
    loss = keras_losses.TokenCrossEntropy(smoothing=smoothing)(labels, logits)  # what fit reduces
    for value in (torch_side.item(), float(keras_side), float(loss)):
        assert value == pytest.approx(reference, abs=1e-6, rel=1e-6)


@pytest.mark.parametrize("smoothing", SMOOTHING[1:])
def test_classification_loss_is_torchs_cross_entropy(smoothing):
    logits, labels = random_case((29,), classes=10, seed=3, ignored=0)
    reference = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels), label_smoothing=smoothing)
    keras_side = keras_losses.SmoothedCrossEntropy(smoothing)(labels, logits)
    assert float(keras_side) == pytest.approx(reference.item(), abs=1e-6, rel=1e-6)
    # smoothing changes the loss: a test of the formula, not of two zeros
    assert (
        abs(reference.item() - F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels)).item())
        > 1e-3
    )


class Fixed(torch.nn.Module):
    """A 'model' that returns the logits it is given."""

    def forward(self, x):
        return x


@pytest.mark.parametrize("smoothing", SMOOTHING[1:])
def test_the_lightning_tasks_smooth_the_loss_not_the_bits(smoothing):
    logits, labels = random_case((2, 9), classes=13, seed=5)
    batch = (torch.from_numpy(logits), torch.from_numpy(labels))
    flat = (batch[0].reshape(-1, 13), batch[1].reshape(-1))
    smoothed = F.cross_entropy(*flat, ignore_index=IGNORE_INDEX, label_smoothing=smoothing).item()
    plain = F.cross_entropy(*flat, ignore_index=IGNORE_INDEX).item()
    loss, metrics, _ = LanguageModelTask(Fixed(), None, None, label_smoothing=smoothing).loss_and_metrics(
        batch
    )
    assert loss.item() == pytest.approx(smoothed, rel=1e-6)
    assert metrics["bpc"].item() == pytest.approx(plain / np.log(2), rel=1e-6)
    assert float(keras_losses.TokenBits()(labels, logits)) == pytest.approx(plain / np.log(2), rel=1e-6)
    loss, _, _ = TokenTask(Fixed(), None, None, label_smoothing=smoothing).loss_and_metrics(batch)
    assert loss.item() == pytest.approx(smoothed, rel=1e-6)
    x, y = random_case((31,), classes=10, seed=6, ignored=0)
    loss, _, _ = ClassificationTask(Fixed(), None, None, label_smoothing=smoothing).loss_and_metrics(
        (torch.from_numpy(x), torch.from_numpy(y))
    )
    expected = F.cross_entropy(torch.from_numpy(x), torch.from_numpy(y), label_smoothing=smoothing).item()
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_the_recipe_field_is_checked():
    recipe = {"model": {"architecture": "convnet-tiny"}, "trainer": {"label_smoothing": 0.1}}
    assert load_recipe(recipe).trainer.label_smoothing == 0.1
    for bad in (1.0, -0.1):
        with pytest.raises(RecipeError, match=r"trainer\.label_smoothing"):
            load_recipe({**recipe, "trainer": {"label_smoothing": bad}})
