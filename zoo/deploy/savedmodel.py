"""A TensorFlow SavedModel of the Keras twin: ``model.export(format="tf_saved_model")``.

The directory holds the traced forward pass and the weights; ``tf.saved_model.load(path)``
runs it with TensorFlow alone (``.serve(*inputs)``, or the ``serving_default`` signature
with the inputs by name, as TensorFlow Serving calls it). Its output is ``output_0``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zoo.deploy.check import ExportError, Runner, first_line
from zoo.deploy.inputs import InputPort
from zoo.deploy.keras_twin import input_signature, keras_inputs

SIGNATURE = "serving_default"
EXPORTER = "keras.Model.export(format='tf_saved_model')"


def export(model, ports: list[InputPort], path: Path) -> str:
    try:
        model.export(
            str(path), format="tf_saved_model", input_signature=input_signature(ports), verbose=False
        )
    except Exception as error:
        raise ExportError(f"Keras' SavedModel export failed: {first_line(error)}") from None
    return EXPORTER


def runner(path: Path, ports: list[InputPort]) -> Runner:
    """The SavedModel's serving signature, called by input name as a server would call it."""
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(path))
        signature = loaded.signatures[SIGNATURE]
    except Exception as error:
        raise ExportError(f"{path}: TensorFlow cannot load the SavedModel: {first_line(error)}") from None
    names = sorted(signature.structured_input_signature[1])
    if names != sorted(port.name for port in ports):
        raise ExportError(
            f"{path}: the serving signature's inputs are {names}, not {[p.name for p in ports]}"
        )

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        feed = {port.name: tf.constant(v) for port, v in zip(ports, keras_inputs(inputs, ports), strict=True)}
        (output,) = signature(**feed).values()
        return output.numpy()

    return run
