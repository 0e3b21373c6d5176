"""What a model's tensors and one pass through it take, counted before anything is built:
the weights from the weight table's shapes, and a forward pass traced on torch's ``meta`` device
(shapes only, no memory). zoo.peak_memory adds these up into a command's peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zoo.checkpoint.tables import tensor_specs

if TYPE_CHECKING:
    from collections.abc import Callable

    from zoo.family import ArchitectureConfig, Family


def parameter_bytes(family: Family, config: ArchitectureConfig) -> int:
    """The model's tensors in the checkpoint's float32, from the weight table: nothing is built."""
    return sum(math.prod(spec.shape) * 4 for spec in tensor_specs(family.weight_table(config)).values())


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (a tensor, or lists and tuples of them; anything else is 0)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(v) for v in value)
    return 0


def activation_bytes(
    family: Family,
    config: ArchitectureConfig,
    inputs: Any,
    training: bool = True,
    checkpointing: bool = False,
) -> int:
    """What one float32 forward pass of the torch twin keeps for the backward (``training``),
    or the largest two module outputs alive at once (inference), traced on torch's ``meta``
    device: shapes only, no memory. ``inputs`` is a numpy batch in the canonical layout. With
    ``checkpointing`` (trainer.gradient_checkpointing), each recomputed block keeps only its
    inputs, and the backward holds one block's own activations at a time, the largest counted.
    0 when the family's twin cannot be built there (the estimate then counts weights only)."""
    import torch

    try:
        with torch.device("meta"):
            model = family.build_torch(config)
        if checkpointing and family.supports_grad_checkpointing("lightning"):
            family.set_grad_checkpointing(model, "lightning", True)
        x = torch.empty(inputs.shape, dtype=torch.from_numpy(inputs[:0]).dtype, device="meta")
        trace = _trace_pass(model, x, training)
    except Exception:  # a twin that does not build or run on meta tensors: weights only
        return 0
    if training:
        # the loss keeps its own copy of the output
        return sum(trace.saved.values()) + max(trace.blocks, default=0) + 2 * tensor_bytes(trace.output)
    return sum(sorted(trace.outputs)[-2:])


@dataclass
class _Trace:
    """What one traced pass saved for the backward (bytes by storage, each storage once), what
    each recomputed block held beside that, and every leaf module's output, in bytes."""

    parameters: set[int]
    saved: dict[int, int] = field(default_factory=dict)
    blocks: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)  # alive until counted, so no storage address is reused
    output: Any = None

    def packing(self, into: dict[int, int], known: dict[int, int] | None = None) -> Callable[[Any], Any]:
        """A saved-tensors hook that counts, into ``into``, each storage that is neither a
        parameter nor already in ``known``."""

        def pack(tensor):
            storage = tensor.untyped_storage()
            if storage._cdata not in self.parameters and storage._cdata not in (known or ()):
                into.setdefault(storage._cdata, storage.nbytes())
                self.kept.append(tensor)
            return tensor

        return pack

    def run_block(self, block, *args):
        """A recomputed block's call as torch's checkpoint makes it: its inputs are kept, and
        what it saves inside is held only while the backward recomputes it."""
        import torch

        pack = self.packing(self.saved)
        for arg in args:
            if isinstance(arg, torch.Tensor):
                pack(arg)
        inner: dict[int, int] = {}
        with torch.autograd.graph.saved_tensors_hooks(self.packing(inner, self.saved), lambda t: t):
            out = block(*args)
        self.blocks.append(sum(inner.values()))
        return out


def _trace_pass(model, x, training: bool) -> _Trace:
    """Run ``model`` on the meta tensor ``x``, counting what autograd saves and what each leaf
    module outputs."""
    import torch

    from zoo.nn.torch import remat

    trace = _Trace({p.untyped_storage()._cdata for p in model.parameters()})
    hooks = [
        m.register_forward_hook(lambda m, a, out: trace.outputs.append(tensor_bytes(out)))
        for m in model.modules()
        if not list(m.children())
    ]
    model.train(training)
    with (
        torch.set_grad_enabled(training),
        torch.autograd.graph.saved_tensors_hooks(trace.packing(trace.saved), lambda t: t),
        remat.traced(trace.run_block),
    ):
        trace.output = model(x)
    for hook in hooks:
        hook.remove()
    return trace
