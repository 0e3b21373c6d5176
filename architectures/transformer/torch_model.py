"""The transformer family's torch twin: a plain ``nn.Module``, trained by zoo's Lightning task.

Blocks are written out rather than taken from ``nn.TransformerEncoderLayer``: its
inference fast path computes differently from its training path, and owning the block
gives per-block control (gradient checkpointing) and names the Keras twin mirrors.
Attention is zoo's own (``zoo.nn.torch.SelfAttention``, ``nn.MultiheadAttention``'s
tensors), computed exactly as the Keras twin's.
"""

from __future__ import annotations

import torch
from torch import nn

from architectures.transformer.config import TransformerConfig
from zoo.nn.errors import InputError, sequence_length_message
from zoo.nn.torch import Embedding, SelfAttention, blocked_mask
from zoo.nn.torch.remat import checkpointed_call

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}  # nn.GELU is the exact erf form


class Block(nn.Module):
    """Self-attention and a feed-forward net, each a residual branch, pre- or post-norm."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.norm_first = cfg.norm_first
        self.norm1 = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.attn = SelfAttention(d, cfg.num_heads, dropout=cfg.dropout)
        self.norm2 = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.ff1 = nn.Linear(d, cfg.ff_dim)
        self.act = ACTIVATIONS[cfg.activation]()
        self.dropout = nn.Dropout(cfg.dropout)  # on the feed-forward hidden layer
        self.ff2 = nn.Linear(cfg.ff_dim, d)
        self.dropout1 = nn.Dropout(cfg.dropout)  # on the attention branch
        self.dropout2 = nn.Dropout(cfg.dropout)  # on the feed-forward branch

    def forward(self, x: torch.Tensor, blocked: torch.Tensor | None = None) -> torch.Tensor:
        """``blocked``: True where attention is blocked, (T, T) or (N, 1, T, T)."""
        if self.norm_first:
            x = x + self._attend(self.norm1(x), blocked)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._attend(x, blocked))
        return self.norm2(x + self._feed_forward(x))

    def _attend(self, x: torch.Tensor, blocked: torch.Tensor | None) -> torch.Tensor:
        return self.dropout1(self.attn(x, blocked))

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self.ff2(self.dropout(self.act(self.ff1(x)))))


class Transformer(nn.Module):
    """Classification: (N, T, input_size) float -> (N, num_classes).
    Language modelling: (N, T) int64 ids -> (N, T, vocab_size), causal.

    ``padding_mask`` (N, T) bool marks padding with True (``key_padding_mask``'s
    convention): no real step attends to it, and mean pooling skips it. A padding step
    attends to itself as well, so no attention row is empty (``zoo.nn.torch.blocked_mask``).
    Token ids outside the vocabulary and sequences longer than ``max_len`` are refused with
    :class:`zoo.nn.errors.InputError`, in the Keras twin's words.

    With ``grad_checkpointing`` on, training keeps only each block's input for backward
    and recomputes the block there (dropout masks included: torch replays the RNG state).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.zoo_config = cfg
        d = cfg.d_model
        if cfg.causal:
            self.embed = Embedding(cfg.vocab_size, d)
            nn.init.normal_(self.embed.weight, std=0.02)
        else:
            self.embed = nn.Linear(cfg.input_size, d)
        if cfg.positions == "learned":
            self.pos_embed = nn.Embedding(cfg.max_len, d)
            nn.init.normal_(self.pos_embed.weight, std=0.02)
        else:
            self.pos_embed = None
            # Fixed, so not part of the state_dict (nor of the checkpoint).
            self.register_buffer("pos_table", torch.from_numpy(cfg.sinusoidal_table()), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if cfg.norm_first else None
        self.head = nn.Linear(d, cfg.outputs)

    def forward_features(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden states (N, T, d_model), after the final norm of pre-norm models."""
        steps = x.shape[1]
        if steps > self.zoo_config.max_len:
            raise InputError(sequence_length_message(self.zoo_config.max_len, steps))
        positions = self.pos_embed.weight[:steps] if self.pos_embed is not None else self.pos_table[:steps]
        h = self.dropout(self.embed(x) + positions)
        blocked = blocked_mask(steps, padding_mask, self.zoo_config.causal, x.device)
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            h = checkpointed_call(block, h, blocked) if checkpointing else block(h, blocked)
        return h if self.norm is None else self.norm(h)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_head(self, h: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.zoo_config.causal:
            return self.head(h)
        if self.zoo_config.pooling == "first":
            return self.head(h[:, 0])
        if padding_mask is None:
            return self.head(h.mean(dim=1))
        keep = (~padding_mask.to(device=h.device, dtype=torch.bool)).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, padding_mask), padding_mask)


def build(cfg: TransformerConfig) -> Transformer:
    return Transformer(cfg)
