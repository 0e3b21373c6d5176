"""ONNX from the torch twin: ``torch.onnx.export``, dynamo exporter first.

The dynamo exporter (``dynamo=True``, built on ``torch.export`` and onnxscript) is tried
first with the export's dynamic axes. Where it cannot trace the model (``torch.export``
unrolls recurrent layers over the traced steps, and refuses data-dependent checks such as a
recurrent net's right-padding check), the TorchScript exporter (``dynamo=False``,
``dynamic_axes``) is used instead. Whichever wrote the file, the file is then run by
onnxruntime at several batch sizes and lengths (:mod:`zoo.deploy.check`); a file whose axes
were frozen fails there.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from zoo.deploy.check import ExportError, first_line
from zoo.deploy.inputs import InputPort
from zoo.deploy.torch_twin import arguments, dynamic_shapes, traced_module

OPSET = 18
OUTPUT = "logits"


def export(model, ports: list[InputPort], example: dict, context: int | None, path: Path) -> str:
    """Write the ONNX file to ``path``; returns the exporter that wrote it."""
    module = traced_module(model, ports)
    args, kwargs = arguments(example, ports)
    try:
        _dynamo(module, args, kwargs, ports, context, path)
        return "torch.onnx.export(dynamo=True)"
    except Exception as error:
        dynamo_error = first_line(error)
    try:
        _torchscript(module, (*args, kwargs), ports, path)
    except Exception as error:
        raise ExportError(
            f"torch.onnx.export failed with both exporters: dynamo: {dynamo_error}; "
            f"TorchScript: {first_line(error)}"
        ) from None
    return f"torch.onnx.export(dynamo=False) (the dynamo exporter failed: {dynamo_error})"


def _dynamo(
    module, args: tuple, kwargs: dict, ports: list[InputPort], context: int | None, path: Path
) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            args,
            kwargs=kwargs,
            dynamo=True,
            dynamic_shapes=dynamic_shapes(ports, context),
            input_names=[port.name for port in ports],
            output_names=[OUTPUT],
            opset_version=OPSET,
            verbose=False,
        )
    program.save(str(path), external_data=False)  # one file: it is moved into place after the check


def _torchscript(module, args: tuple, ports: list[InputPort], path: Path) -> None:
    import torch

    axes = {
        port.name: {axis: name for axis, name in enumerate(port.torch_axes) if isinstance(name, str)}
        for port in ports
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=False,
            input_names=[port.name for port in ports],
            output_names=[OUTPUT],
            dynamic_axes=axes,
            opset_version=OPSET,
        )
