"""Weight decay that spares biases and norms, and gradient clipping: one meaning in both frameworks.

``optimizer.decay_biases_and_norms: false`` exempts the 1-D canonical tensors in both twins
(torch: a parameter group with ``weight_decay`` 0; Keras: the variables holding exactly those
tensors, found through the weight table). ``trainer.gradient_clip_norm`` is torch's
``clip_grad_norm_`` on the accumulated gradients, in Keras with torch's own formula.
"""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy
import torch
from conftest import tiny

import zoo
from zoo import registry
from zoo.checkpoint.tables import decay_exempt_tensors, decay_exempt_variables

RECIPE = "recipes/cnn-digits.yaml"
SETTINGS = (
    "model.architecture=convnet-tiny",
    "optimizer.name=adamw",
    "optimizer.lr=0.01",
    "optimizer.weight_decay=0.5",
    "trainer.accumulate_grad_batches=2",
    "trainer.max_epochs=1",
)


def weights(tmp_path, framework: str, *overrides: str) -> dict[str, np.ndarray]:
    result = zoo.train(RECIPE, framework, tiny(tmp_path / framework, *SETTINGS, *overrides))
    return safetensors.numpy.load_file(result.checkpoint)


def gap(a: dict[str, np.ndarray], b: dict[str, np.ndarray], names) -> float:
    return max(float(np.max(np.abs(a[n] - b[n]))) for n in names)


def test_both_frameworks_spare_the_same_tensors_and_clip_alike(tmp_path):
    spared = ("optimizer.decay_biases_and_norms=false", "trainer.gradient_clip_norm=0.05")
    lightning = weights(tmp_path / "a", "lightning", *spared)
    keras = weights(tmp_path / "b", "keras", *spared)
    floats = [n for n, v in lightning.items() if v.dtype.kind == "f"]
    assert gap(lightning, keras, floats) < 1e-4
    # Each switch changes the result: decaying the biases moves exactly the 1-D tensors...
    decayed = weights(tmp_path / "c", "lightning", "trainer.gradient_clip_norm=0.05")
    config = registry.resolve_config("convnet-tiny")
    exempt = decay_exempt_tensors(registry.get_family("cnn").weight_table(config))
    assert gap(decayed, lightning, sorted(exempt)) > 1e-3
    # ...and without clipping the steps are far larger than at a global norm of 0.05.
    unclipped = weights(tmp_path / "d", "keras", "optimizer.decay_biases_and_norms=false")
    assert gap(unclipped, keras, floats) > 1e-2


def test_keras_clipping_is_torchs_clip_grad_norm():
    from zoo.keras.optimizers import TorchSGD

    rng = np.random.default_rng(0)
    grads = [rng.normal(size=shape).astype(np.float32) for shape in ((4, 3), (3,), (2, 2, 5))]
    for max_norm in (0.5, 1e3):  # clipped, and left alone
        params = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
        for p, g in zip(params, grads, strict=True):
            p.grad = torch.from_numpy(g.copy())
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        clipped = TorchSGD(0.1, clip_norm=max_norm)._clip_gradients([torch_free(g) for g in grads])
        for p, got in zip(params, clipped, strict=True):
            np.testing.assert_allclose(np.asarray(got), p.grad.numpy(), rtol=1e-6, atol=0)


def torch_free(array: np.ndarray):
    import tensorflow as tf

    return tf.constant(array)


@pytest.mark.parametrize("name", [e.name for e in registry.list_architectures() if e.kind == "family"])
def test_every_family_exempts_whole_keras_variables(name):
    """Every Keras variable is all exempt or all decayed (a recurrent cell's stacked biases are one
    exempt variable), and the exempt variables hold exactly the exempt tensors."""
    config = registry.resolve_config(name)
    table = registry.get_family(config.architecture).weight_table(config)
    exempt = decay_exempt_tensors(table)
    layers = {layer for layer, _ in decay_exempt_variables(table)}
    owners = {port.layer for port in table for spec in port.tensors if spec.name in exempt}
    assert layers == owners
