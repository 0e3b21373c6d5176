"""``torch.export``: the torch twin as an ``ExportedProgram`` file (``.pt2``).

The program holds the forward graph in ATen ops and the weights; ``torch.export.load(path)
.module()(*inputs)`` runs it with torch alone, no zoo and no model code. Its inputs are the
export's inputs in order (:mod:`zoo.deploy.inputs`), batch and steps dynamic.

Known limit (torch 2.13): ``torch.export`` unrolls ``nn.RNN``/``nn.LSTM``/``nn.GRU`` over the
steps of the traced example, so a recurrent net cannot keep a dynamic steps axis; the export
is refused with torch's words rather than written with a frozen axis.
"""

from __future__ import annotations

from pathlib import Path

from zoo.deploy.check import ExportError, Runner, first_line
from zoo.deploy.inputs import InputPort, has_steps
from zoo.deploy.torch_twin import arguments, dynamic_shapes, traced_module

EXPORTER = "torch.export.export (strict=False)"


def export(model, ports: list[InputPort], example: dict, context: int | None, path: Path) -> str:
    """Write the program to ``path``; returns the exporter used."""
    import torch

    recurrent = [name for name, layer in model.named_modules() if isinstance(layer, torch.nn.RNNBase)]
    if recurrent and has_steps(ports):
        raise ExportError(
            f"torch.export cannot keep the steps axis of this model dynamic: it unrolls its recurrent "
            f"layers ({', '.join(recurrent)}) over the steps of the traced example (torch "
            f"{torch.__version__.split('+')[0]}), so the program would read only sequences of that "
            "length. Export --format onnx instead (its check runs it at several lengths)."
        )
    module = traced_module(model, ports)
    args, kwargs = arguments(example, ports)
    try:
        program = torch.export.export(
            module, args, kwargs, dynamic_shapes=dynamic_shapes(ports, context), strict=False
        )
    except Exception as error:
        raise ExportError(f"torch.export could not export this model: {first_line(error)}") from None
    torch.export.save(program, str(path))
    return EXPORTER


def runner(path: Path, ports: list[InputPort]) -> Runner:
    """The saved program, loaded back as a user would load it."""
    import torch

    try:
        module = torch.export.load(str(path)).module()
    except Exception as error:
        raise ExportError(f"{path}: torch.export.load cannot read the program: {first_line(error)}") from None

    def run(inputs):
        with torch.no_grad():
            args, kwargs = arguments(inputs, ports)
            return module(*args, **kwargs).numpy()

    return run
