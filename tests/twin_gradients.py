"""Each parameter's gradient of ``sum(logits * W)`` in either twin, under the canonical (torch)
names: what the decoder families compare against transformers' ``CASE-gradients.npz``
(``tests/reference/hf_llama.py``'s ``gradients``)."""

from __future__ import annotations

import numpy as np
import torch

from zoo import registry
from zoo.checkpoint.tables import keras_layer


def torch_pass(model, ids: np.ndarray, padding: np.ndarray, weights: np.ndarray):
    """(logits, {name: gradient}) of the torch twin in eval mode."""
    model.eval().zero_grad()
    logits = model(torch.from_numpy(ids), padding_mask=torch.from_numpy(padding))
    (logits * torch.from_numpy(weights)).sum().backward()
    grads = {name: p.grad.numpy() for name, p in model.named_parameters()}
    return logits.detach().numpy(), grads


def keras_pass(model, ids: np.ndarray, padding: np.ndarray, weights: np.ndarray):
    """(logits, {name: gradient}) of the Keras twin in inference mode, each variable's gradient
    turned to the torch layout by the family's weight table."""
    import tensorflow as tf

    table = registry.get_family(model.zoo_config.architecture).weight_table(model.zoo_config)
    ports = []
    for port in table:
        layer = keras_layer(model, port.layer)
        ports.append((port, [keras_layer(layer, v) for v in port.variables]))
    variables = [v for _, vs in ports for v in vs]
    with tf.GradientTape() as tape:
        logits = model(ids, padding_mask=padding, training=False)
        loss = tf.reduce_sum(logits * weights)
    found = dict(zip(map(id, variables), tape.gradient(loss, variables), strict=True))
    grads = {}
    for port, vs in ports:
        arrays = [np.asarray(tf.convert_to_tensor(found[id(v)])) for v in vs]
        for spec, array in zip(port.tensors, port.to_torch(*arrays), strict=True):
            grads[spec.name] = np.asarray(array)
    return np.asarray(logits), grads


def largest_gap(grads: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> tuple[float, list]:
    """The largest gradient gap relative to the model's largest gradient (a tensor whose gradient
    is nearly zero is all rounding), and the three worst tensors for the message."""
    largest = max(float(np.abs(g).max()) for g in expected.values())
    gaps = {name: float(np.abs(grads[name] - g).max()) / largest for name, g in expected.items()}
    return max(gaps.values()), sorted(gaps.items(), key=lambda kv: -kv[1])[:3]
