"""Activation memory without a GPU: the bytes autograd keeps for the backward pass."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator


@contextlib.contextmanager
def saved_for_backward(exclude: Iterable = ()) -> Iterator[dict[int, int]]:
    """Count the storages autograd saves inside the block, each once, by data pointer.

    ``exclude`` (tensors, e.g. the parameters) are not activations and are left out.
    The figure repeats exactly run to run, which an allocator's peak on CPU does not.
    """
    import torch

    skip = {t.untyped_storage().data_ptr() for t in exclude}
    saved: dict[int, int] = {}

    def pack(tensor):
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
            return tensor
        if storage.data_ptr() not in skip:
            saved.setdefault(storage.data_ptr(), storage.nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield saved
