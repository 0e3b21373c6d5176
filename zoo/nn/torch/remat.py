"""Block-wise gradient checkpointing for zoo's torch twins.

``torch.utils.checkpoint`` keeps a block's inputs and runs the block again in the
backward pass. Dropout needs nothing: the RNG state is saved and replayed
(``preserve_rng_state``), so the recompute draws the forward pass's masks. Buffers do:
the recompute would update BatchNorm's running statistics and batch counter a second
time, so a checkpointed step would not train like a plain one (nor like the Keras twin).
:func:`checkpointed_call` puts them back after the recompute.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def checkpointed_call(block: nn.Module, *args: Any) -> Any:
    """``block(*args)``, keeping only its inputs for backward and recomputing the rest there."""
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
