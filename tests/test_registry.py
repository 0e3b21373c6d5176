"""Every registered architecture and preset: both twins build, agree on every tensor, start from
one seeded initialisation, give the same outputs after a checkpoint round trip in either
direction, and load back bit for bit through the fast checkpoint path (fast_load_checks).

Building the twins is most of what these tests cost (a Keras build of a 20M-parameter entry is
seconds, and each test used to build its own), so each entry is built once per framework and
config in this module: the ``entry`` fixture is module-scoped and parametrized by name, so
pytest runs one entry's tests together and drops its models before the next entry's. Tests
that change a twin (a train-mode pass moves BatchNorm statistics) take it through
:meth:`Entry.pristine`, which puts its initial tensors back first. Every registry-wide test of
an entry lives in this one file, so one pytest worker builds it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    ALL_NAMES,
    BUILT_NAMES,
    FRAMEWORKS,
    forward_keras,
    forward_torch,
    max_diff,
    parity_config,
)
from fast_load_checks import assert_same_tensors, check_keras_load, check_torch_load

import zoo
from zoo import registry
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tables import count_parameters, tensor_specs
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.initial_weights import initial_tensors
from zoo.nn.keras import quantized as keras_quantized
from zoo.nn.torch import quantized as torch_quantized

TOLERANCE = 1e-5  # float32 twins ...
NOISE = 10.0  # ... or this many times torch's own float32 error (against a float64 copy), for deep
# nets in train mode, where BatchNorm over a few values per channel amplifies rounding
SEED = 3  # of every twin built here: create_model with a seed gives both frameworks one start
# A quantized checkpoint's outputs against the float one's, as a fraction of their largest
# magnitude (eval mode, the entries' seeded random init): measured at most 2.4e-2 for int8 and 0.31
# for int4 in groups of 32 (vit-tiny, whose 16x16 patches sum 768 products a channel).
QUANTIZED_MOVES = {"int8": 0.05, "int4": 0.5}

# Module scope: an entry's tests share its fixture, and pytest orders them together by name.
EVERY_ENTRY = pytest.mark.parametrize("name", ALL_NAMES, scope="module")
BUILT_ENTRIES = pytest.mark.parametrize("name", BUILT_NAMES, scope="module")


def _other(framework: str) -> str:
    return "keras" if framework == "lightning" else "lightning"


@dataclass
class Crossing:
    """A pristine twin saved and loaded in the other framework: its tensors when saved, the
    loaded twin, and the tensors that twin held right after the load."""

    original: dict[str, np.ndarray]
    loaded: Any
    as_loaded: dict[str, np.ndarray]


class Entry:
    """One registry entry's twins, each built (create_model with a seed) once for all its tests.

    Two configs, two pairs where they differ: the entry's own (:meth:`twin`; counts, weight
    tables, the seeded start, never changed by a test) and :func:`conftest.parity_config`'s, with
    dropout off and a small image (:meth:`pristine`; round trips and fast loads, which run
    train-mode passes). Where they are equal, one pair serves both."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name = name
        self.folder = folder
        self.family = registry.get_family(name)
        self.config = registry.resolve_config(name)
        self.parity_config = parity_config(name)
        self._twins: dict[str, Any] = {}
        self._parity: dict[str, tuple[Any, dict[str, np.ndarray], bool]] = {}
        self._crossed: dict[str, Crossing] = {}

    def twin(self, framework: str) -> Any:
        """The twin of the entry's own config as ``create_model(name, seed=SEED)`` returns it.
        Tests only read it: the seeded-start test compares the two as built. Where the parity
        config is the entry's own (no dropout, no large image), it is the pristine twin."""
        if self.parity_config == self.config:
            return self.pristine(framework)
        if framework not in self._twins:
            self._twins[framework] = zoo.create_model(self.name, framework=framework, seed=SEED)
        return self._twins[framework]

    def pristine(self, framework: str) -> Any:
        """The parity config's twin holding the tensors (and, in torch, the mode) it was built
        with: a test before may have moved its BatchNorm statistics."""
        if framework not in self._parity:
            fields = self.parity_config.model_dump(exclude={"architecture", "preset"})
            model = zoo.create_model(self.name, framework=framework, seed=SEED, **fields)
            self._parity[framework] = (model, model_tensors(model), getattr(model, "training", False))
        model, initial, training = self._parity[framework]
        load_tensors(model, initial)
        if framework == "lightning":
            model.train(training)
        return model

    def crossed(self, source: str) -> Crossing:
        """The pristine ``source`` twin saved and loaded through ``zoo.load_checkpoint`` in the
        other framework, once for the tests that compare the two; the loaded twin holds the
        tensors it was loaded with (a test before may have run it in train mode). Its other
        state (a torch twin's non-persistent buffers) is the load's, untouched."""
        if source not in self._crossed:
            original = self.pristine(source)
            path = zoo.save_checkpoint(original, self.folder / f"{source}.safetensors")
            loaded = zoo.load_checkpoint(path, framework=_other(source))
            self._crossed[source] = Crossing(model_tensors(original), loaded, model_tensors(loaded))
        crossing = self._crossed[source]
        load_tensors(crossing.loaded, crossing.as_loaded)
        return crossing


@pytest.fixture(scope="module")
def entry(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Entry]:
    """The entry ``name``'s twins, shared by its tests and dropped when pytest moves on."""
    yield Entry(name, tmp_path_factory.mktemp(name))


@EVERY_ENTRY
def test_weight_table_is_the_torch_state_dict(entry):
    family, config = entry.family, entry.config
    state = entry.twin("lightning").state_dict()
    specs = tensor_specs(family.weight_table(config))
    assert list(specs) == list(state), "table order and names must equal state_dict()"
    for key, spec in specs.items():
        assert tuple(state[key].shape) == spec.shape, key
        assert str(state[key].dtype).removeprefix("torch.") == spec.dtype, key


@EVERY_ENTRY
def test_parameter_counts_are_equal(entry):
    family, config = entry.family, entry.config
    torch_model, keras_model = entry.twin("lightning"), entry.twin("keras")
    expected = count_parameters(family.weight_table(config))
    assert sum(p.numel() for p in torch_model.parameters() if p.requires_grad) == expected
    assert sum(int(np.prod(v.shape)) for v in keras_model.trainable_variables) == expected
    listed = {e.name: e.parameters for e in registry.list_architectures()}
    assert listed[entry.name] == expected


@EVERY_ENTRY
def test_create_model_with_a_seed_gives_equal_tensors_in_both_frameworks(entry):
    torch_model, keras_model = entry.twin("lightning"), entry.twin("keras")
    torch_tensors, keras_tensors = model_tensors(torch_model), model_tensors(keras_model)
    assert torch_tensors.keys() == keras_tensors.keys()
    for key, value in torch_tensors.items():
        np.testing.assert_array_equal(keras_tensors[key], value, err_msg=key)
    other = initial_tensors(entry.family, torch_model.zoo_config, seed=SEED + 1)
    assert any(not np.array_equal(other[k], v) for k, v in torch_tensors.items())


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("source", FRAMEWORKS)
@BUILT_ENTRIES
def test_round_trip_parity(entry, source, training):
    family, config = entry.family, entry.parity_config
    loaded = entry.crossed(source).loaded
    original = entry.pristine(source)
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


@pytest.mark.parametrize("scheme", ["int8", "int4"])
@BUILT_ENTRIES
def test_a_quantized_checkpoint_runs_alike_in_both_twins(entry, scheme, tmp_path):
    """Every tensor zoo quantizes in this entry (matrices, kernels, recurrent weights, tables)
    goes through ``zoo quantize`` and back into both twins, which hold its integers: the torch
    twin's outputs are those of its float weights to the bit, in fewer bytes; the twins agree as
    any two twins of one checkpoint do; and they stay within the scheme's bound of the float model's."""
    family, config = entry.family, entry.parity_config
    torch_model = entry.pristine("lightning")
    x = config.example_input(16, seed=2)
    float_out = forward_torch(torch_model, x, False)
    path = zoo.save_checkpoint(torch_model, tmp_path / "float.safetensors")
    quantized = zoo.quantize_checkpoint(path, tmp_path / "quantized.safetensors", scheme)
    assert quantized.quantized > 0 and quantized.bytes < quantized.float_bytes
    load_tensors(torch_model, read_checkpoint(quantized.path).float32_tensors())
    held = {framework: zoo.load_checkpoint(quantized.path, framework) for framework in FRAMEWORKS}
    out_torch = forward_torch(held["lightning"], x, False)
    out_keras = forward_keras(held["keras"], x, family, False)
    assert np.array_equal(out_torch, forward_torch(torch_model, x, False))
    assert torch_quantized.held_bytes(held["lightning"]) < torch_quantized.held_bytes(torch_model)
    assert keras_quantized.held_bytes(held["keras"]) < keras_quantized.held_bytes(entry.pristine("keras"))
    exact = copy.deepcopy(torch_model).double()
    out_exact = forward_torch(exact, x.astype(np.float64) if x.dtype == np.float32 else x, False)
    assert max_diff(out_torch, out_keras) <= max(TOLERANCE, NOISE * max_diff(out_torch, out_exact))
    assert 0 < max_diff(out_torch, float_out) <= QUANTIZED_MOVES[scheme] * np.abs(float_out).max()


@BUILT_ENTRIES
def test_a_checkpoint_crosses_frameworks_bit_for_bit(entry):
    for source in FRAMEWORKS:
        crossing = entry.crossed(source)
        assert_same_tensors(crossing.as_loaded, crossing.original)


@BUILT_ENTRIES
def test_torch_load_is_the_saved_model_bit_for_bit(entry, tmp_path):
    check_torch_load(entry.pristine("lightning"), entry.family, entry.parity_config, tmp_path)


@BUILT_ENTRIES
def test_keras_load_is_the_saved_model_bit_for_bit(entry, tmp_path):
    check_keras_load(entry.pristine("keras"), entry.family, entry.parity_config, tmp_path)


@BUILT_ENTRIES
def test_torch_users_can_load_state_dict_directly(entry, tmp_path):
    from safetensors.torch import load_file

    path = zoo.save_checkpoint(entry.twin("keras"), tmp_path / "model.safetensors")
    torch_model = copy.deepcopy(entry.twin("lightning"))  # the entry's own stays as built
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
