"""A token embedding that refuses ids outside the vocabulary, with the Keras twin's message.

Cost of the check (it runs on every lookup): on the CPU, in eager mode, the ids' smallest
and largest values are read (one pass over an integer tensor that is tiny next to the
lookup) and a bad batch raises :class:`zoo.nn.errors.InputError` at once. On an
accelerator, or while ``torch.compile`` traces, reading them back would stall the device
(or break the graph) on every step, so the check is ``torch._assert_async`` instead: no
host synchronisation; a bad batch fails the step at the device's next synchronisation
with a device-side assertion (on the CPU under ``torch.compile``, a ``RuntimeError``
carrying the same message, which :func:`zoo.nn.errors.input_error` recognises).
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.nn.errors import InputError, token_ids_message


def check_token_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """Raise (or assert on the device) unless every id lies in [0, vocab_size)."""
    if ids.device.type != "cpu" or torch.compiler.is_compiling():
        torch._assert_async(((ids >= 0) & (ids < vocab_size)).all(), token_ids_message(vocab_size))
        return
    if ids.numel():
        low, high = torch.aminmax(ids)
        if low < 0 or high >= vocab_size:
            raise InputError(token_ids_message(vocab_size))


class Embedding(nn.Embedding):
    """``nn.Embedding`` (same ``weight``, same init) whose lookup checks the ids first.

    torch's own lookup raises a bare ``IndexError`` for a bad id and the Keras twin's
    would wrap a negative one round to the last row; both twins raise the same
    :class:`zoo.nn.errors.InputError` instead.
    """

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_token_ids(ids, self.num_embeddings)
        return super().forward(ids)
