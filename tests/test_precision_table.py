"""Precision is defined once (``zoo.precision.PRECISIONS``), and every consumer's view agrees
with it: the recipe schema, the capability tables, Lightning's Trainer and plugins, the Keras
policies and zoo's Keras build, the memory estimate and ``zoo compare``'s bounds. A precision
added to one of them only, or a number changed in one place, fails here."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from zoo.precision import DTYPES, PRECISIONS, REFERENCE, Precision, keras_policy, lightning_precision

WORDS = list(typing.get_args(Precision))


def test_the_table_covers_every_recipe_precision():
    from zoo.recipe import CAPABILITIES, KERAS_POLICIES, TrainerConfig

    schema = typing.get_args(TrainerConfig.model_fields["precision"].annotation)
    assert list(PRECISIONS) == WORDS
    assert set(schema) == set(WORDS)
    for capabilities in CAPABILITIES.values():
        assert set(capabilities.precisions) == set(WORDS), capabilities.framework
    assert set(KERAS_POLICIES) == set(WORDS)
    for word, meaning in PRECISIONS.items():
        assert meaning.word == word
        assert {meaning.parameters, meaning.products} <= set(DTYPES)
        assert meaning.on_cpu is None or PRECISIONS[meaning.on_cpu].on_cpu is None
        assert meaning.reference is None or meaning.reference in PRECISIONS


def test_the_numbers_are_the_ones_zoo_always_used():
    """Behaviour pinned: the bytes the memory estimate counts, compare's references,
    allowance and update rounding unit, exactly as before the table existed."""
    bytes_per_parameter = {
        "32-true": 4,
        "64-true": 8,
        "bf16-mixed": 4,
        "16-mixed": 4,
        "bf16-true": 2,
        "16-true": 2,
    }
    reference = {"32-true": "64-true", "64-true": None, **dict.fromkeys(WORDS[2:], "32-true")}
    eps = {name: float(np.finfo(name).eps) for name in ("float64", "float32", "float16")}
    epsilon = {"64-true": eps["float64"], "bf16-true": 2.0**-7, "16-true": eps["float16"]}
    epsilon |= dict.fromkeys(["32-true", "bf16-mixed", "16-mixed"], eps["float32"])
    assert {w: m.bytes_per_parameter for w, m in PRECISIONS.items()} == bytes_per_parameter
    assert {w: m.reference for w, m in PRECISIONS.items()} == reference
    assert {w: m.parameter_epsilon for w, m in PRECISIONS.items()} == epsilon
    assert REFERENCE.as_dict() == {
        "weights": 0.0,
        "forward": 1e-5,
        "gradient": 1e-4,
        "loss": 1e-4,
        "update": 1e-4,
    }
    assert all(m.tolerances == REFERENCE for m in PRECISIONS.values())
    assert [w for w, m in PRECISIONS.items() if m.loss_scaling] == ["16-mixed"]
    assert {w: m.on_cpu for w, m in PRECISIONS.items() if m.on_cpu} == {
        "16-mixed": "bf16-mixed",
        "16-true": "bf16-true",
    }


def test_the_recipe_tables_read_it():
    from zoo.recipe import KERAS_POLICIES
    from zoo.recipe.capabilities import KERAS, LIGHTNING, cpu_problems

    for word, meaning in PRECISIONS.items():
        assert LIGHTNING.precisions[word] == lightning_precision(word) == word
        assert KERAS.precisions[word] == KERAS_POLICIES[word] == keras_policy(word) == meaning.keras_policy
        refused = cpu_problems(word, "auto", "test")
        assert bool(refused) == (meaning.on_cpu is not None)
        assert all(repr(meaning.on_cpu) in problem for problem in refused)


@pytest.mark.parametrize("word", WORDS)
def test_the_memory_estimate_and_compare_read_it(word):
    from zoo.compare.tolerances import parameter_epsilon, reference_precision, tolerances_for
    from zoo.peak_memory import parameter_scale

    meaning = PRECISIONS[word]
    assert parameter_scale(word) * 4 == meaning.bytes_per_parameter
    assert tolerances_for(word) == meaning.tolerances
    assert reference_precision(word) == meaning.reference
    assert parameter_epsilon(word) == meaning.parameter_epsilon


@pytest.mark.parametrize("word", WORDS)
def test_torch_dtypes_agree(word):
    """Each dtype name is torch's, with the bytes and unit roundoff the table gives it, and
    compare's torch twin is cast as Lightning's plugin casts the module."""
    import torch

    from zoo.compare.twins import torch_parameter_dtype

    meaning = PRECISIONS[word]
    for name in (meaning.parameters, meaning.products):
        dtype = getattr(torch, name)
        assert (dtype.itemsize, torch.finfo(dtype).eps) == (DTYPES[name].bytes, DTYPES[name].epsilon)
    expected = None if meaning.cast_to is None else getattr(torch, meaning.cast_to)
    assert torch_parameter_dtype(word) == expected


@pytest.mark.filterwarnings("ignore:.*AMP with fp16 is not supported on CPU")
@pytest.mark.parametrize("word", WORDS)
def test_lightnings_plugin_means_what_the_table_says(word):
    """The plugin Lightning's Trainer makes of the word (zoo compare's passes run in it):
    autocast in the products' dtype where mixed, the module cast to the weights' dtype. On a
    CPU Lightning runs 16-mixed as bf16-mixed, the table's ``on_cpu``; and only 16-mixed
    scales the loss."""
    import torch
    from lightning.pytorch.plugins.precision import MixedPrecision

    from zoo.compare.steps import precision_plugin

    meaning = PRECISIONS[word]
    plugin = precision_plugin(lightning_precision(word))
    if meaning.mixed and meaning.on_cpu is not None:
        assert plugin.precision == PRECISIONS[meaning.on_cpu].lightning
        meaning = PRECISIONS[meaning.on_cpu]
    assert plugin.precision == meaning.lightning
    module = plugin.convert_module(torch.nn.Linear(2, 2))
    with plugin.forward_context():
        assert torch.get_default_dtype() == getattr(torch, meaning.parameters)
        assert module.weight.dtype == getattr(torch, meaning.parameters)
        autocast = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        assert autocast == (None if meaning.autocast is None else getattr(torch, meaning.autocast))
    if PRECISIONS[word].mixed:
        scaler = MixedPrecision(lightning_precision(word), device="cpu").scaler
        assert (scaler is not None) == PRECISIONS[word].loss_scaling


@pytest.mark.parametrize("word", WORDS)
def test_keras_builds_what_the_table_says(word):
    """The Keras policy keeps the weights in ``parameters`` and computes in ``products``; zoo's
    build gives that policy to the product layers only and keeps the rest in the weights' dtype."""
    import keras

    from zoo.nn.keras.precision import apply_mixed, dtype_policy

    meaning = PRECISIONS[word]
    policy = keras.DTypePolicy(meaning.keras_policy)
    assert (policy.variable_dtype, policy.compute_dtype) == (meaning.parameters, meaning.products)
    with dtype_policy(word):
        layers = [keras.Input((3,)), keras.layers.Dense(4), keras.layers.LayerNormalization()]
        model = keras.Sequential(layers)
    dense, norm = apply_mixed(model, word).layers
    assert (dense.variable_dtype, dense.compute_dtype) == (meaning.parameters, meaning.products)
    assert (norm.variable_dtype, norm.compute_dtype) == (meaning.parameters, meaning.parameters)
    assert keras.config.dtype_policy().name == "float32"  # the policy did not leak
