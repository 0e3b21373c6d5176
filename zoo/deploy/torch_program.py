"""``torch.export``: the torch twin as an ``ExportedProgram`` file (``.pt2``).

The program holds the forward graph in ATen ops and the weights; ``torch.export.load(path)
.module()(*inputs)`` runs it with torch alone, no zoo and no model code. Its inputs are the
export's inputs in order (:mod:`zoo.deploy.inputs`), batch and steps dynamic.

Recurrent layers: torch 2.13's ``torch.export`` unrolls ``nn.RNN``/``nn.LSTM``/``nn.GRU`` over
the steps of the traced example, which would freeze the steps axis. The program is therefore
traced from a copy of the model whose recurrent layers are ``scan`` loops over the same
parameters (:mod:`zoo.nn.torch.recurrent_scan`), so the steps stay dynamic; the check then
compares it with the training model's own fused, packed layers.
"""

from __future__ import annotations

from pathlib import Path

from zoo.deploy.check import ExportError, Runner, first_line
from zoo.deploy.inputs import InputPort
from zoo.deploy.torch_twin import arguments, dynamic_shapes, traced_module

EXPORTER = "torch.export.export (strict=False)"


def export(model, ports: list[InputPort], example: dict, context: int | None, path: Path) -> str:
    """Write the program to ``path``; returns the exporter used."""
    import torch

    from zoo.nn.torch.recurrent_scan import exportable

    module = traced_module(exportable(model), ports)
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
