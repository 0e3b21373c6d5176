"""ONNX from the Keras twin: Keras' own ``model.export(format="onnx")``.

On the TensorFlow backend Keras traces ``model.__call__`` over the input signature into a
``tf.function`` and converts it with tf2onnx (``keras.src.export.onnx``); the input names are
the signature's (:mod:`zoo.deploy.keras_twin`). Images are channels last (NHWC).

tf2onnx 1.17 writes TensorFlow's ``Erfc`` (Keras' exact GELU is ``0.5 x erfc(-x / sqrt 2)``)
as an ONNX ``Erfc`` node, an operator ONNX does not have: onnxruntime refuses the file. Such
nodes are rewritten as ``1 - Erf(x)`` (measured on bert-micro and vit-micro: within 1e-6 of the
Keras twin; docs/deploy.md).
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import numpy as np

from zoo.deploy.check import ExportError, first_line
from zoo.deploy.inputs import InputPort
from zoo.deploy.keras_twin import input_signature

OPSET = 18
EXPORTER = "keras.Model.export(format='onnx') (tf2onnx)"


def export(model, ports: list[InputPort], path: Path) -> str:
    """Write the ONNX file to ``path``; returns the exporter used."""
    quiet = logging.getLogger("tf2onnx")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # it logs the Erfc it cannot convert as an error; fixed below
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # tf2onnx reports every rewrite it makes
            model.export(
                str(path), format="onnx", input_signature=input_signature(ports), opset_version=OPSET,
                verbose=False,
            )  # fmt: skip
    except Exception as error:
        raise ExportError(f"Keras' ONNX export (tf2onnx) failed: {first_line(error)}") from None
    finally:
        quiet.setLevel(level)
    _replace_erfc(path)
    return EXPORTER


def _replace_erfc(path: Path) -> None:
    """``Erfc(x)`` -> ``Sub(1, Erf(x))`` in the graph at ``path`` (float32: the exports' dtype)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    if not any(node.op_type == "Erfc" for node in model.graph.node):
        return
    nodes = []
    for node in model.graph.node:
        if node.op_type != "Erfc" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        (x,), (out,) = node.input, node.output
        one = numpy_helper.from_array(np.array(1.0, np.float32))
        nodes += [
            helper.make_node("Constant", [], [f"{out}/one"], value=one, name=f"{node.name}/one"),
            helper.make_node("Erf", [x], [f"{out}/erf"], name=f"{node.name}/erf"),
            helper.make_node("Sub", [f"{out}/one", f"{out}/erf"], [out], name=node.name),
        ]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
