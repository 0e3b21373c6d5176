"""Multi-head self-attention, written out so the Keras twin can compute exactly the same.

``nn.MultiheadAttention`` picks among fused kernels (scaled_dot_product_attention, an
inference fast path) that round differently from each other and from anything Keras
does. This module keeps its parameter names, shapes and initialisation, so checkpoints
of either load unchanged, and spells the arithmetic out; ``zoo.nn.keras.attention``
does the same steps in the same order. Under mixed precision the rule in both twins is:
matrix products in the low-precision dtype, the softmax (and the scaling before it) in
float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    """Self-attention over (N, T, E) with ``num_heads`` heads of E / num_heads features.

    Parameters are ``nn.MultiheadAttention``'s: ``in_proj_weight`` (3E, E) with query, key
    and value stacked, ``in_proj_bias`` (3E,), and ``out_proj`` (a Linear E -> E); they are
    initialised as there, drawing from torch's generator in the same order (the output
    Linear's default draw, then Xavier-uniform projections, then zero biases), so a model
    built after the same ``torch.manual_seed`` starts from the same values.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)  # on the attention probabilities
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.MultiheadAttention._reset_parameters``: Xavier-uniform projections, zero biases."""
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.in_proj_bias)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, blocked: torch.Tensor | None = None) -> torch.Tensor:
        """(N, T, E) -> (N, T, E). ``blocked``: True where a query may not attend to a key,
        broadcastable to (N, heads, T, T): (T, T) or (N, 1, T, T), see :func:`blocked_mask`."""
        return self.forward_cached(x, blocked)[0]

    def forward_cached(
        self,
        x: torch.Tensor,
        blocked: torch.Tensor | None = None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Incremental decoding: this step's T queries attend over the ``past`` keys and values
        (each (N, heads, P, head_dim)) followed by this step's own, so a decoder reads each token
        once instead of re-reading its whole window per generated token.

        Returns the output (N, T, E) and the keys and values to pass as ``past`` next time, now
        (N, heads, P + T, head_dim). ``blocked`` is broadcastable to (N, heads, T, P + T)
        (:func:`blocked_mask` with ``past=P``). The arithmetic is :meth:`forward`'s, key for key.
        """
        n, t, _ = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = (
            part.reshape(n, t, self.num_heads, self.head_dim).transpose(1, 2) for part in qkv.chunk(3, -1)
        )
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(-2, -1)  # (N, heads, T, P + T), in the compute dtype
        probs = attention_probabilities(scores, blocked, self.head_dim)
        out = self.dropout(probs) @ v
        return self.out_proj(out.transpose(1, 2).reshape(n, t, self.embed_dim)), (k, v)


def attention_probabilities(
    scores: torch.Tensor, blocked: torch.Tensor | None, head_dim: int
) -> torch.Tensor:
    """Scaled, masked softmax in float32 at least (float64 stays float64), back in the scores' dtype."""
    dtype = torch.promote_types(scores.dtype, torch.float32)
    logits = scores.to(dtype) * head_dim**-0.5
    if blocked is not None:
        logits = logits.masked_fill(blocked, float("-inf"))
    return logits.softmax(dim=-1).to(scores.dtype)


def blocked_mask(
    steps: int,
    padding_mask: torch.Tensor | None = None,
    causal: bool = False,
    device=None,
    past: int = 0,
) -> torch.Tensor | None:
    """True where attention is blocked: later keys (``causal``) and padding keys (``padding_mask``
    (N, P + T), True at padding), except a step's own key, so no row is empty (an all-blocked row
    would give NaN, which the zero weights of other rows would carry everywhere).

    The queries are the ``steps`` positions after ``past`` cached ones (incremental decoding,
    :meth:`SelfAttention.forward_cached`); the keys are all P + T positions.
    ``None`` when nothing is blocked, (T, P + T) without padding, (N, 1, T, P + T) with it.
    """
    if padding_mask is None and not causal:
        return None
    queries = torch.arange(past, past + steps, device=device)[:, None]
    keys = torch.arange(past + steps, device=device)[None, :]
    blocked = keys > queries if causal else None  # key after query
    if padding_mask is None:
        return blocked
    padding = padding_mask.to(device=device, dtype=torch.bool)[:, None, None, :]
    blocked = padding if blocked is None else padding | blocked
    return blocked & (keys != queries)
