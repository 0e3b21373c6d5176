"""What the Keras exporters share: the input signature and the training model's output.

Keras' ``model.export`` traces ``model(*inputs)`` over a list of ``tf.TensorSpec``; each spec
carries the input's name (:mod:`zoo.deploy.inputs`), which becomes the ONNX input name and
the SavedModel signature's argument name. Images are channels last, as the Keras twin reads
them; a dynamic axis is ``None``.
"""

from __future__ import annotations

import numpy as np

from zoo.deploy.inputs import InputPort, model_kwargs
from zoo.keras.data import keras_layout


def input_signature(ports: list[InputPort]) -> list:
    import tensorflow as tf

    return [
        tf.TensorSpec(
            [axis if isinstance(axis, int) else None for axis in port.keras_axes], port.dtype, name=port.name
        )
        for port in ports
    ]


def keras_inputs(inputs: dict[str, np.ndarray], ports: list[InputPort]) -> list[np.ndarray]:
    """A canonical-layout batch as the Keras twin (and its exports) read it."""
    return [
        keras_layout(inputs[port.name], "image" if port.name == "images" else "sequence") for port in ports
    ]


def reference(model, ports: list[InputPort]):
    """The training model's output for a batch (inference mode)."""

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        first, named = model_kwargs(ports, keras_inputs(inputs, ports))
        return np.asarray(model(first, **named, training=False))

    return run
