"""What the torch exporters share: the module they trace and its dynamic axes.

Both ``torch.export`` and the ONNX exporters trace a ``forward`` whose arguments are the
export's inputs in order (see :mod:`zoo.deploy.inputs`); the twin itself takes the first
positionally and the rest (``padding_mask``, ``token_type_ids``) by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.deploy.inputs import BATCH, STEPS, InputPort, model_kwargs

OPTIONAL = ("padding_mask", "token_type_ids")  # what a twin takes besides its first input, by name


def traced_module(model, ports: list[InputPort]):
    """``model`` (in eval mode) behind a forward of the export's inputs, in order."""
    import torch

    extras = [port.name for port in ports[1:]]
    unknown = set(extras) - set(OPTIONAL)
    if unknown:
        raise AssertionError(f"no exported forward takes the inputs {sorted(unknown)}")

    class Exported(torch.nn.Module):
        def __init__(self, twin: torch.nn.Module):
            super().__init__()
            self.twin = twin

        # Named parameters, not **kwargs: the exporters take an input's name from its parameter.
        def forward(
            self,
            x: torch.Tensor,
            padding_mask: torch.Tensor | None = None,
            token_type_ids: torch.Tensor | None = None,
        ) -> torch.Tensor:
            given = {"padding_mask": padding_mask, "token_type_ids": token_type_ids}
            return self.twin(x, **{name: given[name] for name in extras})

    return Exported(model.eval()).eval()


def dynamic_shapes(ports: list[InputPort], context: int | None) -> dict[str, Any]:
    """torch.export's spec, by argument of :func:`traced_module`'s forward: one ``Dim`` per
    named axis, shared by every input that has it (the padding mask's steps are the ids'
    steps), the steps at most the model's context."""
    from torch.export import Dim

    dims = {BATCH: Dim(BATCH, min=1, max=1 << 20), STEPS: Dim(STEPS, min=1, max=context or 1 << 20)}
    specs = [
        {axis: dims[name] for axis, name in enumerate(port.torch_axes) if isinstance(name, str)}
        for port in ports
    ]
    return {"x": specs[0], **dict(zip([p.name for p in ports[1:]], specs[1:], strict=True))}


def arguments(inputs: dict[str, np.ndarray], ports: list[InputPort]) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of :func:`traced_module`'s forward for a batch."""
    import torch

    values = [torch.from_numpy(np.ascontiguousarray(inputs[port.name])) for port in ports]
    first, named = model_kwargs(ports, values)
    return (first,), named


def reference(model, ports: list[InputPort]):
    """The training model's output for a batch, the numbers every torch export must give."""
    import torch

    module = traced_module(model, ports)

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            args, kwargs = arguments(inputs, ports)
            return module(*args, **kwargs).numpy()

    return run
