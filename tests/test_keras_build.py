"""A Keras twin built cheaply (explicit ``build`` methods, one token or no forward pass at all)
is the twin a full-size first call builds: the same variables under the same paths, and with
the same weights in, the same outputs. Build *time* is measured in bench/, not asserted here."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import forward_keras, parity_config

from zoo import registry

# Every family whose build skips the full-size call, with its task variants where the build
# differs (a pooler, a tied MLM head, a causal or a float-input transformer).
CASES = [
    ("gpt2-micro", {}),
    ("gpt2-micro", {"task": "features"}),
    ("bert-micro", {}),
    ("bert-micro", {"task": "classification", "num_classes": 3}),
    ("bert-micro", {"task": "masked_language_modeling"}),
    ("vit-micro", {}),
    ("transformer-small", {}),
    ("transformer-tiny", {"task": "language_modeling"}),
]


def _paths(model) -> list[tuple[str, tuple[int, ...]]]:
    """(path without the layers' unique-name counters, shape) of every variable, in order: Keras
    numbers layer names across the session (``embedding_2/embeddings`` in a second instance)."""
    return [(re.sub(r"_\d+(?=/)", "", v.path), tuple(v.shape)) for v in model.weights]


@pytest.mark.parametrize(
    ("name", "overrides"), CASES, ids=[f"{n}-{o.get('task', 'default')}" for n, o in CASES]
)
def test_cheap_build_is_the_full_call_build(name, overrides):
    family = registry.get_family(name)
    config = parity_config(name, **overrides)
    cheap = family.build_keras(config)
    x = config.example_input(2, seed=1)
    full = type(cheap)(config)
    forward_keras(full, x, family, training=False)  # built by Keras on its first full-size call

    assert _paths(cheap) == _paths(full)
    full.set_weights(cheap.get_weights())
    got = forward_keras(cheap, x, family, training=False)
    want = forward_keras(full, x, family, training=False)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("name", "std_of"),
    [
        ("gpt2-micro", lambda c: c.initializer_range / (2 * c.n_layer) ** 0.5),
        ("bert-micro", lambda c: c.initializer_range),
        ("vit-micro", lambda c: 0.02),
    ],
)
def test_residual_projection_drawn_at_creation(name, std_of):
    """The output projections' initialisers are set when the layers are created (no redraw
    after the build): their draw has the reference implementation's standard deviation."""
    config = registry.resolve_config(name)
    model = registry.get_family(name).build_keras(config)
    blocks = getattr(model, "h", None) or model.blocks
    kernels = [np.asarray(block.attn.out_proj.kernel).ravel() for block in blocks]
    if name == "gpt2-micro":
        kernels += [np.asarray(block.mlp.fc2.kernel).ravel() for block in blocks]
    drawn = np.concatenate(kernels)
    assert drawn.std() == pytest.approx(std_of(config), rel=0.05)
    assert abs(drawn.mean()) < 0.1 * std_of(config)
