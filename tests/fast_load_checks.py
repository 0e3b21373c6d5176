"""The fast checkpoint path's checks on one twin: a loaded model is the saved one, bit for bit.

``load_checkpoint`` builds the torch twin on the meta device (no random initialisation) and
hands it the checkpoint's tensors, each in memory of its own; ``save_checkpoint`` writes the
torch twin's memory without copying it first. None of that may change a single bit: every
parameter and buffer (BatchNorm statistics, non-persistent tables), the outputs in train and
eval mode, and a training step afterwards must equal those of an ordinary build followed by
``load_state_dict``.

The checks live here, apart from the tests, because two files run them on twins they get
differently: test_registry on each registry entry's twins, built once for all of that entry's
tests (a Keras build of a 20M-parameter entry costs seconds), and test_checkpoint_fast_load on
the configs the registry's defaults leave out, built on the spot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from conftest import forward_keras, forward_torch
from safetensors.numpy import load_file

import zoo
from zoo.checkpoint.tensors import meta_tensors, model_tensors
from zoo.family import ArchitectureConfig, Family


def assert_same_tensors(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """The same names, and under each the same dtype, shape and bits."""
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert np.array_equal(a[key], b[key]), key


def check_torch_load(original: Any, family: Family, config: ArchitectureConfig, folder: Path) -> None:
    """``original`` (a torch twin of ``config``; its BatchNorm statistics are moved here) saved
    and loaded back in Lightning is what an ordinary build given its state dict is, bit for bit."""
    x = config.example_input(8, seed=1)
    forward_torch(original, x, training=True)  # moves BatchNorm statistics off their defaults
    path = zoo.save_checkpoint(original, folder / "model.safetensors")
    assert_same_tensors(load_file(path), model_tensors(original))  # safetensors reads what zoo wrote

    rng = torch.get_rng_state()
    loaded = zoo.load_checkpoint(path, framework="lightning")
    assert torch.equal(rng, torch.get_rng_state()), "built without a random initialisation"
    reference = family.build_torch(config)  # the ordinary way: a built twin, then a copy
    reference.load_state_dict({k: v.clone() for k, v in original.state_dict().items()})
    assert not meta_tensors(loaded)
    assert loaded.training == reference.training
    for kind in ("named_parameters", "named_buffers"):  # buffers: persistent or not
        got, want = dict(getattr(loaded, kind)()), dict(getattr(reference, kind)())
        assert list(got) == list(want)
        for key in want:
            assert type(got[key]) is type(want[key]) and got[key].dtype == want[key].dtype, key
            assert got[key].requires_grad == want[key].requires_grad, key
            assert torch.equal(got[key], want[key]), key
    pointers = [p.untyped_storage().data_ptr() for p in loaded.parameters()]
    assert len(set(pointers)) == len(pointers), "every parameter has memory of its own"

    for training in (False, True):
        assert np.array_equal(forward_torch(loaded, x, training), forward_torch(reference, x, training))
    assert_same_tensors(model_tensors(loaded), model_tensors(reference))  # statistics after train mode

    for model in (loaded, reference):  # trainable, and trains the same
        model.train()
        torch.manual_seed(5)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.from_numpy(x)).float().square().mean().backward()
        optimizer.step()
    assert_same_tensors(model_tensors(loaded), model_tensors(reference))


def check_keras_load(original: Any, family: Family, config: ArchitectureConfig, folder: Path) -> None:
    """``original`` (a Keras twin of ``config``; its BatchNorm statistics are moved here) saved
    and loaded back in Keras holds the same weights and gives the same outputs, bit for bit."""
    x = config.example_input(8, seed=1)
    forward_keras(original, x, family, training=True)  # moves BatchNorm statistics
    path = zoo.save_checkpoint(original, folder / "model.safetensors")
    assert_same_tensors(load_file(path), model_tensors(original))

    loaded = zoo.load_checkpoint(path, framework="keras")
    for a, b in zip(original.weights, loaded.weights, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy()), a.path
    for training in (False, True):
        assert np.array_equal(
            forward_keras(loaded, x, family, training), forward_keras(original, x, family, training)
        )
