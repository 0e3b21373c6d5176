"""What every decoder-only language-model twin shares (torch; the Keras twin: ``zoo.nn.keras.decoder``).

A family's decoder gives ``_run(ids, padding_mask, cache, cached)`` (the final hidden states
and, when ``cached``, the extended ``zoo.nn.cache.DecodeCache``) and ``forward_head(h)``; this
base turns them into the interface zoo's tools use: ``forward`` (logits, or the hidden states
for task "features"), ``forward_features``, ``decode`` (``zoo.sample``'s key/value-cache
path) and ``set_grad_checkpointing``.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.nn.cache import DecodeCache
from zoo.nn.errors import InputError


class CausalDecoder(nn.Module):
    """(N, T) int64 token ids -> (N, T, vocab_size) logits, or the final hidden states (N, T,
    width) for task "features"; ``padding_mask`` (N, T) bool, True at padding."""

    grad_checkpointing: bool = False
    model_name = "this model"  # for messages: "GPT-2 has no token types"

    def forward(
        self,
        ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if token_type_ids is not None:
            raise InputError(f"{self.model_name} has no token types: pass token_type_ids=None")
        h = self.forward_features(ids, padding_mask)
        return h if self.zoo_config.active_task == "features" else self.forward_head(h)

    def forward_features(self, ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The final norm's hidden states (transformers' base model output)."""
        return self._run(ids, padding_mask, None, cached=False)[0]

    @torch.no_grad()
    def decode(
        self, ids: torch.Tensor, cache: DecodeCache | None = None, padding_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, DecodeCache]:
        """Read ``ids`` (N, T) after what ``cache`` holds: the logits (N, vocab_size) of the last
        position and the cache extended by these T tokens. ``padding_mask`` (N, T) marks padding
        among these tokens (a left-padded batch of prompts); later calls pass new tokens only."""
        h, cache = self._run(ids, padding_mask, cache, cached=True)
        return self.forward_head(h[:, -1]), cache

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def _run(self, ids, padding_mask, cache: DecodeCache | None, cached: bool):
        raise NotImplementedError

    def forward_head(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
