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

from zoo.nn.cache import KeyValueSlots
from zoo.nn.errors import InputError
from zoo.nn.torch.norm import RMSNorm
from zoo.nn.torch.rotary import apply_rotary


class SelfAttention(nn.Module):
    """Self-attention over (N, T, E) with ``num_heads`` heads of E / num_heads features.

    Parameters are ``nn.MultiheadAttention``'s: ``in_proj_weight`` (3E, E) with query, key
    and value stacked, ``in_proj_bias`` (3E,), and ``out_proj`` (a Linear E -> E); they are
    initialised as there, drawing from torch's generator in the same order (the output
    Linear's default draw, then Xavier-uniform projections, then zero biases), so a model
    built after the same ``torch.manual_seed`` starts from the same values.
    """

    # LoRA's q/k/v adapters (zoo.lora.torch_lora): a callable x -> (N, T, 3E) added to the
    # fused projection's output, or None.
    in_proj_delta = None

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
        past: tuple[torch.Tensor, torch.Tensor] | KeyValueSlots | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Incremental decoding: this step's T queries attend over the ``past`` keys and values
        (each (N, heads, P, head_dim)) followed by this step's own, so a decoder reads each token
        once instead of re-reading its whole window per generated token.

        Returns the output (N, T, E) and the keys and values to pass as ``past`` next time, now
        (N, heads, P + T, head_dim): concatenated, or written into ``past``'s slots where it is a
        ``zoo.nn.cache.KeyValueSlots`` (the decoders' ``decode`` passes one). ``blocked`` is
        broadcastable to (N, heads, T, P + T) (:func:`blocked_mask` with ``past=P``). The
        arithmetic is :meth:`forward`'s, key for key.
        """
        n, t, _ = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        if self.in_proj_delta is not None:
            qkv = qkv + self.in_proj_delta(x)
        q, k, v = (
            part.reshape(n, t, self.num_heads, self.head_dim).transpose(1, 2) for part in qkv.chunk(3, -1)
        )
        k, v, present = joined_keys_values(past, k, v)
        scores = q @ k.transpose(-2, -1)  # (N, heads, T, P + T), in the compute dtype
        probs = attention_probabilities(scores, blocked, self.head_dim)
        out = self.dropout(probs) @ v
        return self.out_proj(out.transpose(1, 2).reshape(n, t, self.embed_dim)), present


def attention_probabilities(
    scores: torch.Tensor,
    blocked: torch.Tensor | None,
    head_dim: int,
    scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Scaled, masked softmax in float32 at least (float64 stays float64), back in the scores' dtype.
    ``scale`` replaces ``head_dim ** -0.5`` (Gemma's ``query_pre_attn_scalar ** -0.5``);
    ``softcap`` bounds the scaled scores to (-softcap, softcap) by ``softcap * tanh(s / softcap)``
    before the mask (Gemma 2's ``attn_logit_softcapping``)."""
    dtype = torch.promote_types(scores.dtype, torch.float32)
    logits = scores.to(dtype) * (head_dim**-0.5 if scale is None else scale)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    if blocked is not None:
        logits = logits.masked_fill(blocked, float("-inf"))
    return logits.softmax(dim=-1).to(scores.dtype)


def blocked_mask(
    steps: int,
    padding_mask: torch.Tensor | None = None,
    causal: bool = False,
    device=None,
    past: int = 0,
    window: int | None = None,
) -> torch.Tensor | None:
    """True where attention is blocked: later keys (``causal``), keys ``window`` or more places
    back (a causal sliding window: Mistral's), and padding keys (``padding_mask`` (N, P + T),
    True at padding), except a step's own key, so no row is empty (an all-blocked row would give
    NaN, which the zero weights of other rows would carry everywhere).

    The queries are the ``steps`` positions after ``past`` cached ones (incremental decoding,
    :meth:`SelfAttention.forward_cached`); the keys are all P + T positions. Places count
    padding too, as transformers' sliding-window mask counts cache positions.
    ``None`` when nothing is blocked, (T, P + T) without padding, (N, 1, T, P + T) with it.
    """
    if padding_mask is None and not causal:
        return None
    queries = torch.arange(past, past + steps, device=device)[:, None]
    keys = torch.arange(past + steps, device=device)[None, :]
    blocked = keys > queries if causal else None  # key after query
    if causal and window is not None:
        blocked = blocked | (keys <= queries - window)
    if padding_mask is None:
        return blocked
    padding = padding_mask.to(device=device, dtype=torch.bool)[:, None, None, :]
    blocked = padding if blocked is None else padding | blocked
    return blocked & (keys != queries)


class GroupedQueryAttention(nn.Module):
    """Self-attention with ``num_kv_heads`` key/value heads shared by groups of query heads
    (grouped-query attention: ``num_kv_heads`` 1 is multi-query, ``num_heads`` plain multi-head),
    rotary positions on queries and keys: transformers' ``LlamaAttention``.

    Its four projections keep transformers' names and layouts (``q_proj``, ``k_proj``,
    ``v_proj``, ``o_proj``, each an ``nn.Linear``), so a Llama, Mistral or Qwen2 state dict maps
    onto it by name. ``qkv_bias`` puts a bias on the query, key and value projections and
    ``out_bias`` one on the output: Llama's ``attention_bias`` is both, Qwen2's attention has
    the first only. ``qk_norm_eps`` (Qwen3's) adds ``q_norm`` and ``k_norm``, RMSNorms of
    ``head_dim`` features on each head's query and key before the rotation (of class ``norm``:
    Gemma 3's are :class:`OffsetRMSNorm`). ``scale`` and ``softcap`` go to
    :func:`attention_probabilities` (Gemma's query scale and Gemma 2's soft cap). Query head h reads
    key/value head ``h // (num_heads / num_kv_heads)``. Arithmetic as :class:`SelfAttention`'s:
    products in the compute dtype, the scaled, masked softmax in float32 at least.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        qkv_bias: bool = False,
        out_bias: bool = False,
        dropout: float = 0.0,
        qk_norm_eps: float | None = None,
        norm: type[RMSNorm] = RMSNorm,
        scale: float | None = None,
        softcap: float | None = None,
    ):
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=out_bias)
        self.dropout = nn.Dropout(dropout)  # on the attention probabilities
        normed = qk_norm_eps is not None  # Qwen3's per-head query and key RMSNorms
        self.q_norm = norm(head_dim, eps=qk_norm_eps) if normed else None
        self.k_norm = norm(head_dim, eps=qk_norm_eps) if normed else None
        self.scale, self.softcap = scale, softcap

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, blocked: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(N, T, hidden) -> (N, T, hidden); ``cos``/``sin`` (N, T, head_dim) from
        ``zoo.nn.torch.rotary.rotary_tables``; ``blocked`` as :func:`blocked_mask` gives it."""
        return self.forward_cached(x, cos, sin, blocked)[0]

    def forward_cached(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        blocked: torch.Tensor | None = None,
        past: tuple[torch.Tensor, torch.Tensor] | KeyValueSlots | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """As :meth:`SelfAttention.forward_cached`: this step's queries over the ``past`` keys and
        values (each (N, num_kv_heads, P, head_dim), keys already turned to their positions)
        and this step's own; returns the output and the keys and values to pass next time."""
        n, t, _ = x.shape
        q = self.q_proj(x).view(n, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(n, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:  # over each head's features, before the rotation
            q, k = self.q_norm(q), self.k_norm(k)
        v = self.v_proj(x).view(n, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k, v, present = joined_keys_values(past, k, v)
        group = self.num_heads // self.num_kv_heads
        keys, values = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ keys.transpose(-2, -1)  # (N, heads, T, P + T), in the compute dtype
        probs = attention_probabilities(scores, blocked, self.head_dim, self.scale, self.softcap)
        out = (self.dropout(probs) @ values).transpose(1, 2).reshape(n, t, self.num_heads * self.head_dim)
        return self.o_proj(out), present


def joined_keys_values(past, keys: torch.Tensor, values: torch.Tensor):
    """The keys and values to attend over, ``past``'s (a ``(keys, values)`` pair or
    ``zoo.nn.cache.KeyValueSlots``, or None) followed by these, and what to pass as ``past``
    next time: the pair concatenated, or the slots written in place."""
    if isinstance(past, KeyValueSlots):
        present = past.extended(keys, values)
        return present.keys, present.values, present
    if past is not None:
        keys, values = torch.cat([past[0], keys], dim=2), torch.cat([past[1], values], dim=2)
    return keys, values, (keys, values)


def joined_padding(
    before: torch.Tensor | None, past: int, padding_mask, ids: torch.Tensor
) -> torch.Tensor | None:
    """The padding of every position a decoder has read (``before``, (N, P), of the ``past``
    cached ones) and reads now (``padding_mask`` (N, T) of ``ids``), or None if none is padding."""
    if padding_mask is None and before is None:
        return None
    n, t = ids.shape
    now = (
        torch.zeros((n, t), dtype=torch.bool, device=ids.device)
        if padding_mask is None
        else torch.as_tensor(padding_mask, device=ids.device).to(torch.bool)
    )
    if tuple(now.shape) != (n, t):
        raise InputError(f"padding_mask must be (N, T) = {(n, t)} like the token ids; got {tuple(now.shape)}")
    if not past:
        return now
    if before is None:
        before = torch.zeros((n, past), dtype=torch.bool, device=ids.device)
    return torch.cat([before, now], dim=1)


def padded_positions(padding: torch.Tensor | None, past: int, steps: int, device) -> torch.Tensor:
    """Each new token's position: (1, T) counting on from ``past``, or with ``padding`` (N, P + T)
    (N, T) where real tokens count from 0 whatever padding comes before them (the position ids
    transformers' ``generate`` derives from the attention mask)."""
    if padding is None:
        return torch.arange(past, past + steps, device=device)[None]
    return (torch.cumsum((~padding).long(), dim=1) - 1).clamp(min=0)[:, past:]
