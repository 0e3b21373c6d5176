"""``init.head_lr``: when fine-tuning, the head moves at its own rate and the backbone at the
optimizer's, in both frameworks.

One plain SGD step (no momentum, no weight decay, constant rate) moves every tensor by
``-rate * gradient``. Two runs from the same start on the same batch, one without a head
rate and one with ``head_lr = 5 * lr``, see the same gradients: the backbone must end
where it did without a head rate, and the head must have moved exactly 5 times as far.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FRAMEWORKS, RECIPE, tiny
from safetensors.numpy import load_file

import zoo
from zoo.checkpoint.metadata import read_checkpoint
from zoo.initial_weights import initial_tensors

LR, RATIO = 0.01, 5.0
HEAD = ("head.fc.weight", "head.fc.bias")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A checkpoint for the digits 0-4 (untrained: only its tensors matter here)."""
    path = tmp_path_factory.mktemp("source") / "source.safetensors"
    return zoo.save_checkpoint(zoo.create_model("convnet-tiny", seed=1, num_classes=5), path)


def one_sgd_step(tmp_path, source, *overrides):
    """Fine-tune on digits 5-7 for exactly one optimizer step (24 samples, one batch)."""
    return zoo.train(
        RECIPE,
        overrides=tiny(
            tmp_path, "trainer.max_epochs=1", "data.classes=[5,6,7]", "data.train_per_class=8",
            "optimizer.name=sgd", f"optimizer.lr={LR}", "schedule.name=constant",
            "schedule.warmup_steps=0", f"init.from={source}", *overrides,
        ),
    )  # fmt: skip


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_head_moves_at_head_lr_and_the_backbone_at_lr(framework, source, tmp_path):
    plain = one_sgd_step(tmp_path, source, f"trainer.framework={framework}")
    fast = one_sgd_step(tmp_path, source, f"trainer.framework={framework}", f"init.head_lr={LR * RATIO}")
    assert [row["step"] for row in plain.history] == [row["step"] for row in fast.history] == ["1"]
    a, b = load_file(plain.checkpoint), load_file(fast.checkpoint)

    # The head is new (3 classes instead of 5): both runs start it from the seeded init.
    found = read_checkpoint(plain.checkpoint)
    start = initial_tensors(found.family, found.config, seed=found.json("recipe")["trainer"]["seed"])
    for name in HEAD:
        moved = a[name] - start[name]
        assert np.abs(moved).max() > 1e-5, f"{name}: the head did not move"
        np.testing.assert_allclose(b[name] - start[name], RATIO * moved, rtol=1e-3, atol=1e-7, err_msg=name)

    # The backbone moved, at the optimizer's rate in both runs.
    before = load_file(source)
    backbone = [name for name in a if name not in HEAD]
    assert any(not np.array_equal(a[name], before[name]) for name in backbone), "the backbone did not move"
    for name in backbone:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=1e-7, err_msg=name)
