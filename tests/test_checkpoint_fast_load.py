"""The fast checkpoint path: a loaded model is the saved one, bit for bit, in both frameworks.

``load_checkpoint`` builds the torch twin on the meta device (no random initialisation) and
hands it the checkpoint's tensors, each in memory of its own; ``save_checkpoint`` writes the
torch twin's memory without copying it first. None of that may change a single
bit: every parameter and buffer (BatchNorm statistics, non-persistent tables), the outputs in
train and eval mode, and a training step afterwards must equal those of an ordinary build
followed by ``load_state_dict``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import BUILT_NAMES, forward_keras, forward_torch, parity_config
from safetensors.numpy import load_file

import zoo
from zoo import registry
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import load_torch, meta_tensors, model_tensors

# Every registry entry, plus what the defaults leave out: token embeddings (language
# models), a non-persistent sinusoidal table, bidirectional and stacked GRU layers.
CASES = [(name, {}) for name in BUILT_NAMES] + [
    ("transformer-tiny", {"task": "language_modeling"}),
    ("transformer-tiny", {"positions": "sinusoidal"}),
    ("transformer-classic-tiny", {"task": "language_modeling", "positions": "sinusoidal"}),
    ("lstm-tiny", {"cell": "gru", "bidirectional": True, "num_layers": 2}),
    ("rnn-tiny", {"task": "language_modeling"}),
]
IDS = [name + "".join(f"-{v}" for v in fields.values()) for name, fields in CASES]


def _create(name, fields, framework):
    fields = parity_config(name, **fields).model_dump(exclude={"architecture", "preset"})
    return zoo.create_model(name, framework=framework, **fields)


def _assert_same_tensors(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert np.array_equal(a[key], b[key]), key


@pytest.mark.parametrize(("name", "fields"), CASES, ids=IDS)
def test_torch_load_is_the_saved_model_bit_for_bit(name, fields, tmp_path):
    family, config = registry.get_family(name), parity_config(name, **fields)
    torch.manual_seed(3)
    original = _create(name, fields, "lightning")
    x = config.example_input(8, seed=1)
    forward_torch(original, x, training=True)  # moves BatchNorm statistics off their defaults
    path = zoo.save_checkpoint(original, tmp_path / "model.safetensors")
    _assert_same_tensors(load_file(path), model_tensors(original))  # safetensors reads what zoo wrote

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
    _assert_same_tensors(model_tensors(loaded), model_tensors(reference))  # statistics after train mode

    for model in (loaded, reference):  # trainable, and trains the same
        model.train()
        torch.manual_seed(5)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.from_numpy(x)).float().square().mean().backward()
        optimizer.step()
    _assert_same_tensors(model_tensors(loaded), model_tensors(reference))


@pytest.mark.parametrize(("name", "fields"), CASES, ids=IDS)
def test_keras_load_is_the_saved_model_bit_for_bit(name, fields, tmp_path):
    family, config = registry.get_family(name), parity_config(name, **fields)
    original = _create(name, fields, "keras")
    x = config.example_input(8, seed=1)
    forward_keras(original, x, family, training=True)  # moves BatchNorm statistics
    path = zoo.save_checkpoint(original, tmp_path / "model.safetensors")
    _assert_same_tensors(load_file(path), model_tensors(original))

    loaded = zoo.load_checkpoint(path, framework="keras")
    for a, b in zip(original.weights, loaded.weights, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy()), a.path
    for training in (False, True):
        assert np.array_equal(
            forward_keras(loaded, x, family, training), forward_keras(original, x, family, training)
        )


@pytest.mark.parametrize(("name", "fields"), CASES, ids=IDS)
def test_a_checkpoint_crosses_frameworks_bit_for_bit(name, fields, tmp_path):
    torch.manual_seed(4)
    for source, target in (("lightning", "keras"), ("keras", "lightning")):
        original = _create(name, fields, source)
        path = zoo.save_checkpoint(original, tmp_path / f"{source}.safetensors")
        loaded = zoo.load_checkpoint(path, framework=target)
        _assert_same_tensors(model_tensors(loaded), model_tensors(original))


def test_model_tensors_is_a_snapshot():
    model = zoo.create_model("convnet-tiny", framework="torch")
    before = model_tensors(model)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    after = model_tensors(model)
    assert all(not np.array_equal(before[k], after[k]) for k, p in model.named_parameters())


def test_leftover_meta_tensors_are_found():
    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)
            self.register_buffer("table", torch.arange(3.0), persistent=False)
            self.plain = torch.ones(2)

    with torch.device("meta"):
        module = Module()
    assert sorted(meta_tensors(module)) == [".plain", "linear.bias", "linear.weight", "table"]


def _cnn_with_state_from_init(config):
    """The CNN twin plus what a meta build cannot keep: state computed by torch in ``__init__``."""
    from architectures.cnn.torch_model import build

    model = build(config)
    model.register_buffer("steps", torch.arange(4.0), persistent=False)
    model.scale = torch.full((2,), 3.0)
    return model


def test_a_twin_with_state_from_init_is_built_the_ordinary_way(tmp_path):
    path = zoo.save_checkpoint(
        zoo.create_model("convnet-tiny", framework="torch"), tmp_path / "m.safetensors"
    )
    checkpoint = read_checkpoint(path)
    family = dataclasses.replace(checkpoint.family, torch_model=f"{__name__}:_cnn_with_state_from_init")
    model = load_torch(dataclasses.replace(checkpoint, family=family))
    assert torch.equal(model.steps, torch.arange(4.0)) and torch.equal(model.scale, torch.full((2,), 3.0))
    _assert_same_tensors(model_tensors(model), load_file(path))
