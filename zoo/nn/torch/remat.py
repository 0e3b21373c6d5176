"""Block-wise gradient checkpointing for zoo's torch twins.

``torch.utils.checkpoint`` keeps a block's inputs and runs the block again in the
backward pass. Dropout needs nothing: the RNG state is saved and replayed
(``preserve_rng_state``), so the recompute draws the forward pass's masks. Buffers do:
the recompute would update BatchNorm's running statistics and batch counter a second
time, so a checkpointed step would not train like a plain one (nor like the Keras twin).
:func:`checkpointed_call` puts them back after the recompute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

# What runs a checkpointed block instead of torch's checkpoint, while set (see :func:`traced`).
_TRACER: ContextVar[Callable[..., Any] | None] = ContextVar("remat_tracer", default=None)


@contextmanager
def traced(run_block: Callable[..., Any]) -> Iterator[None]:
    """Have :func:`checkpointed_call` call ``run_block(block, *args)`` in its place: zoo.peak_memory's
    meta-device trace counts there what a block keeps (its inputs) and what its recompute holds."""
    token = _TRACER.set(run_block)
    try:
        yield
    finally:
        _TRACER.reset(token)


def checkpointed_call(block: nn.Module, *args: Any) -> Any:
    """``block(*args)``, keeping only its inputs for backward and recomputing the rest there."""
    tracer = _TRACER.get()
    if tracer is not None:
        return tracer(block, *args)
    calls = 0

    def run(*inputs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # the forward pass
            return block(*inputs)
        saved = [buffer.detach().clone() for buffer in block.buffers()]
        try:
            return block(*inputs)
        finally:  # also when the recompute stops early, once it has what backward needs
            with torch.no_grad():
                for buffer, value in zip(block.buffers(), saved, strict=True):
                    buffer.copy_(value)

    return checkpoint(run, *args, use_reentrant=False)
