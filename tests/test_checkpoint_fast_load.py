"""The fast checkpoint path: a loaded model is the saved one, bit for bit, in both frameworks
(the checks are fast_load_checks').

Every registry entry's own config is checked in test_registry, on the twins it builds once for
all of that entry's tests; here are the configs the defaults leave out, and the pieces the fast
path rests on.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import parity_config
from fast_load_checks import assert_same_tensors, check_keras_load, check_torch_load
from safetensors.numpy import load_file

import zoo
from zoo import registry
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import load_torch, meta_tensors, model_tensors

# What the registry's defaults leave out: token embeddings (language models), a non-persistent
# sinusoidal table, bidirectional and stacked GRU layers.
CASES = [
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


@pytest.mark.parametrize(("name", "fields"), CASES, ids=IDS)
def test_torch_load_is_the_saved_model_bit_for_bit(name, fields, tmp_path):
    torch.manual_seed(3)
    original = _create(name, fields, "lightning")
    check_torch_load(original, registry.get_family(name), parity_config(name, **fields), tmp_path)


@pytest.mark.parametrize(("name", "fields"), CASES, ids=IDS)
def test_keras_load_is_the_saved_model_bit_for_bit(name, fields, tmp_path):
    original = _create(name, fields, "keras")
    check_keras_load(original, registry.get_family(name), parity_config(name, **fields), tmp_path)


@pytest.mark.parametrize(("name", "fields"), CASES, ids=IDS)
def test_a_checkpoint_crosses_frameworks_bit_for_bit(name, fields, tmp_path):
    torch.manual_seed(4)
    for source, target in (("lightning", "keras"), ("keras", "lightning")):
        original = _create(name, fields, source)
        path = zoo.save_checkpoint(original, tmp_path / f"{source}.safetensors")
        loaded = zoo.load_checkpoint(path, framework=target)
        assert_same_tensors(model_tensors(loaded), model_tensors(original))


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
    assert_same_tensors(model_tensors(model), load_file(path))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_keras_load_read_in_many_chunks_is_the_saved_model(dtype, tmp_path, monkeypatch):
    """The Keras load starts each port as soon as its tensors are read (zoo.checkpoint.file's
    chunks, 32 MiB in use): with chunks of a few KiB, ports start all through the read, and
    the loaded twin is the one a whole read gives, a bfloat16 export's too (each chunk made
    float32 before its ports run)."""
    import zoo.checkpoint.file

    name, fields = "gpt2-micro", {"n_layer": 2}
    torch.manual_seed(5)
    original = _create(name, fields, "lightning")
    path = zoo.save_checkpoint(original, tmp_path / "model.safetensors", dtype=dtype)
    whole = zoo.load_checkpoint(path, framework="keras")
    calls = []
    reader = zoo.checkpoint.file.read_aligned

    def counted(path, arrived=None):
        return reader(path, None if arrived is None else lambda n, t: (calls.append(n), arrived(n, t)))

    monkeypatch.setattr(zoo.checkpoint.file, "READ_CHUNK", 4096)
    monkeypatch.setattr(zoo.checkpoint.tensors, "read_aligned", counted)
    chunked = zoo.load_checkpoint(path, framework="keras")
    assert len(calls) >= 8 and sorted(n for names in calls for n in names) == sorted(load_file(path))
    for a, b in zip(whole.weights, chunked.weights, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy()), a.path
