"""Every registered architecture and preset: both twins build, agree on every tensor, and
give the same outputs after a checkpoint round trip in either direction."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from conftest import ALL_NAMES, BUILT_NAMES, forward_keras, forward_torch, max_diff, parity_config

import zoo
from zoo import registry
from zoo.checkpoint.tables import count_parameters, tensor_specs
from zoo.checkpoint.tensors import model_tensors

TOLERANCE = 1e-5  # float32 twins ...
NOISE = 10.0  # ... or this many times torch's own float32 error (against a float64 copy), for deep
# nets in train mode, where BatchNorm over a few values per channel amplifies rounding


@pytest.mark.parametrize("name", ALL_NAMES)
def test_weight_table_is_the_torch_state_dict(name):
    family = registry.get_family(name)
    config = registry.resolve_config(name)
    state = family.build_torch(config).state_dict()
    specs = tensor_specs(family.weight_table(config))
    assert list(specs) == list(state), "table order and names must equal state_dict()"
    for key, spec in specs.items():
        assert tuple(state[key].shape) == spec.shape, key
        assert str(state[key].dtype).removeprefix("torch.") == spec.dtype, key


@pytest.mark.parametrize("name", ALL_NAMES)
def test_parameter_counts_are_equal(name):
    family = registry.get_family(name)
    config = registry.resolve_config(name)
    torch_model = family.build_torch(config)
    keras_model = family.build_keras(config)
    expected = count_parameters(family.weight_table(config))
    assert sum(p.numel() for p in torch_model.parameters() if p.requires_grad) == expected
    assert sum(int(np.prod(v.shape)) for v in keras_model.trainable_variables) == expected
    listed = {e.name: e.parameters for e in registry.list_architectures()}
    assert listed[name] == expected


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("source", ["lightning", "keras"])
@pytest.mark.parametrize("name", BUILT_NAMES)
def test_round_trip_parity(name, source, training, tmp_path):
    family = registry.get_family(name)
    config = parity_config(name)
    torch.manual_seed(1)
    original = zoo.create_model(
        name, framework=source, **config.model_dump(exclude={"architecture", "preset"})
    )
    path = zoo.save_checkpoint(original, tmp_path / "model.safetensors")
    target = "keras" if source == "lightning" else "lightning"
    loaded = zoo.load_checkpoint(path, framework=target)
    x = config.example_input(16, seed=2)
    torch_model, keras_model = (original, loaded) if source == "lightning" else (loaded, original)
    exact = copy.deepcopy(torch_model).double()
    out_torch = forward_torch(torch_model, x, training)
    out_keras = forward_keras(keras_model, x, family, training)
    out_exact = forward_torch(exact, x.astype(np.float64) if x.dtype == np.float32 else x, training)
    tolerance = max(TOLERANCE, NOISE * max_diff(out_torch, out_exact))
    assert max_diff(out_torch, out_keras) <= tolerance
    # A train-mode pass also updates running statistics: those must agree too.
    after_torch, after_keras = model_tensors(torch_model), model_tensors(keras_model)
    after_exact = {k: v.detach().numpy() for k, v in exact.state_dict().items()}
    for key in after_torch:
        own = NOISE * max_diff(after_torch[key], after_exact[key])
        assert max_diff(after_torch[key], after_keras[key]) <= max(TOLERANCE, own), key


@pytest.mark.parametrize("name", BUILT_NAMES)
def test_torch_users_can_load_state_dict_directly(name, tmp_path):
    from safetensors.torch import load_file

    keras_model = zoo.create_model(name, framework="keras")
    path = zoo.save_checkpoint(keras_model, tmp_path / "model.safetensors")
    torch_model = zoo.create_model(name, framework="torch")
    torch_model.load_state_dict(load_file(path), strict=True)


def test_two_keras_instances_keep_their_own_weights(tmp_path):
    """Keras renames variable paths of a second instance; the table must not care."""
    first = zoo.create_model("convnet-tiny", framework="keras")
    second = zoo.create_model("convnet-tiny", framework="keras")
    path = zoo.save_checkpoint(first, tmp_path / "a.safetensors")
    loaded = zoo.load_checkpoint(path, framework="keras")
    for a, b in zip(first.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert any(max_diff(a.numpy(), b.numpy()) > 0 for a, b in zip(first.weights, second.weights, strict=True))


def test_create_model_rejects_unknown_names_and_frameworks():
    with pytest.raises(KeyError, match="not a registered architecture or preset; known: bert, cnn"):
        zoo.create_model("resnet-9000")
    with pytest.raises(ValueError, match="not one of: lightning"):
        zoo.create_model("cnn", framework="jax")


def test_data_fields_come_from_the_data_unless_set():
    config = registry.resolve_config("cnn")
    assert config.bind({"num_classes": 3, "image_size": 16}).num_classes == 3
    explicit = registry.resolve_config("cnn", num_classes=5)
    with pytest.raises(ValueError, match=r"model.num_classes is 5 but the data has 3"):
        explicit.bind({"num_classes": 3})


@pytest.mark.parametrize("name", list(registry.families()))
def test_every_family_fills_the_declared_contract(name):
    family = registry.families()[name]
    assert registry.check_family(family) == []
    for preset in family.presets:
        config = registry.resolve_config(preset.name)
        x = config.example_input(2)
        assert x.shape == (2, *config.sample_shape())
        assert str(x.dtype) == family.inputs.dtype(config.active_task)
        assert config.active_task in family.tasks


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_declared_gradient_checkpointing_is_what_the_twins_offer(framework):
    family = registry.get_family("convnet-tiny")
    config = registry.resolve_config("convnet-tiny")
    model = family.build_torch(config) if framework == "lightning" else family.build_keras(config)
    assert family.supports_grad_checkpointing(framework)
    family.set_grad_checkpointing(model, framework, True)
    assert model.grad_checkpointing
    undeclared = dataclasses.replace(family, grad_checkpointing=())
    undeclared.set_grad_checkpointing(model, framework, False)  # off is always possible
    with pytest.raises(
        ValueError, match=r"'cnn' family does not support gradient checkpointing on " + framework
    ):
        undeclared.set_grad_checkpointing(model, framework, True)


def test_the_config_declares_its_task_and_context():
    assert registry.resolve_config("cnn").active_task == "classification"
    lm = registry.resolve_config("transformer", task="language_modeling", max_len=64)
    assert lm.active_task == "language_modeling" and lm.context_length() == 64
    assert registry.resolve_config("lstm", task="language_modeling").context_length() is None


def test_data_that_does_not_fit_the_model_is_a_data_error_naming_both():
    from zoo.data import DataError

    config = registry.resolve_config("convnet-tiny")
    with pytest.raises(DataError, match=r"the data \(image_size=0\) does not fit model 'convnet-tiny': .*"):
        config.bind({"image_size": 0})
