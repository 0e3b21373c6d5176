"""An ONNX file run by onnxruntime, as a deployment would run it (CPU provider, default
graph optimisations): the check of both twins' ONNX exports."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zoo.deploy.check import ExportError, Runner, first_line
from zoo.deploy.inputs import InputPort


def runner(path: Path, ports: list[InputPort], framework: str) -> Runner:
    """onnxruntime's session over ``path``; a batch (canonical layout) in, the first output out."""
    import onnxruntime

    from zoo.keras.data import keras_layout

    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:
        raise ExportError(f"{path}: onnxruntime cannot load the export: {first_line(error)}") from None
    names = [i.name for i in session.get_inputs()]
    expected = [port.name for port in ports]
    if names != expected:
        raise ExportError(f"{path}: the export's inputs are {names}, not {expected}")
    kind = "image" if ports[0].name == "images" else "sequence"

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        feed = {
            port.name: keras_layout(inputs[port.name], kind) if framework == "keras" else inputs[port.name]
            for port in ports
        }
        return session.run(None, feed)[0]

    return run
