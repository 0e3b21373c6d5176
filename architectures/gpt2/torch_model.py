"""The gpt2 family's torch twin: transformers' ``GPT2LMHeadModel``, written out.

Same tensors as transformers', under zoo's shared blocks' names (``architectures.gpt2.formats``
renames): ``h.N.attn`` is ``zoo.nn.torch.SelfAttention`` (transformers' ``c_attn`` / ``c_proj``
``Conv1D`` pair, stored [in, out] there, (out, in) here), ``h.N.mlp`` is ``zoo.nn.torch.Mlp``
(``c_fc`` / ``c_proj``). The head is ``F.linear(h, wte.weight)``: no tensor of its own, so
the tie cannot come undone (a ``load_state_dict`` into one of two tied tensors, an optimizer
that holds a copy) and the checkpoint holds the matrix once.

Initialised as transformers' ``GPT2PreTrainedModel._init_weights``: normal(0, 0.02) for every
weight matrix and both embeddings, zero biases, LayerNorm ones and zeros, and both residual
output projections (``attn.c_proj``, ``mlp.c_proj``) at 0.02 / sqrt(2 * n_layer).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from architectures.gpt2.config import GPT2Config, sequence_length_message
from zoo.nn.cache import DecodeCache, KeyValueSlots
from zoo.nn.errors import InputError
from zoo.nn.torch import Embedding, Mlp, SelfAttention, blocked_mask
from zoo.nn.torch.attention import joined_padding, padded_positions
from zoo.nn.torch.decoder import CausalDecoder
from zoo.nn.torch.remat import checkpointed_call


class Block(nn.Module):
    """Pre-LN: ``x + drop(attn(ln_1(x)))``, then ``x + mlp(ln_2(x))`` (the MLP drops its output)."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        d = cfg.n_embd
        self.ln_1 = nn.LayerNorm(d, eps=cfg.layer_norm_epsilon)
        self.attn = SelfAttention(d, cfg.n_head, dropout=cfg.attn_dropout)
        self.attn_drop = nn.Dropout(cfg.resid_dropout)  # transformers' attn.resid_dropout
        self.ln_2 = nn.LayerNorm(d, eps=cfg.layer_norm_epsilon)
        self.mlp = Mlp(d, cfg.inner, activation="gelu_tanh", output_dropout=cfg.resid_dropout)

    def forward(self, x: torch.Tensor, blocked: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn_drop(self.attn(self.ln_1(x), blocked))
        return x + self.mlp(self.ln_2(x))

    def forward_cached(
        self,
        x: torch.Tensor,
        blocked: torch.Tensor | None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`forward`, reading and extending a key/value cache (``decode``)."""
        attended, present = self.attn.forward_cached(self.ln_1(x), blocked, past)
        x = x + self.attn_drop(attended)
        return x + self.mlp(self.ln_2(x)), present


class GPT2(CausalDecoder):
    """(N, T) int64 token ids -> (N, T, vocab_size) logits (task "language_modeling") or the
    final LayerNorm's hidden states (N, T, n_embd) (task "features").

    ``padding_mask`` (N, T) bool marks padding with True: no real token attends to a padding
    token, and positions count only the real tokens before a token, so a left-padded prompt
    gives the logits of the same prompt unpadded (transformers' ``generate`` passes these
    position ids; its plain forward counts padding too, which differs for left padding only).

    ``decode`` reads a prompt, then one token per call, through a key/value cache.
    With ``grad_checkpointing`` on, training keeps only each block's input for backward.
    """

    model_name = "GPT-2"

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.zoo_config = cfg
        d = cfg.n_embd
        self.wte = Embedding(cfg.vocab_size, d)
        self.wpe = nn.Embedding(cfg.n_positions, d)
        self.drop = nn.Dropout(cfg.embd_dropout)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(d, eps=cfg.layer_norm_epsilon)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """transformers' ``_init_weights`` for GPT-2 (zoo's shared blocks draw torch's defaults)."""
        std = self.zoo_config.initializer_range
        projection_std = std / math.sqrt(2 * self.zoo_config.n_layer)
        for table in (self.wte.weight, self.wpe.weight):
            nn.init.normal_(table, std=std)
        for block in self.h:
            nn.init.normal_(block.attn.in_proj_weight, std=std)
            nn.init.zeros_(block.attn.in_proj_bias)
            nn.init.normal_(block.mlp.fc1.weight, std=std)
            nn.init.zeros_(block.mlp.fc1.bias)
            for projection in (block.attn.out_proj, block.mlp.fc2):  # transformers' c_proj
                nn.init.normal_(projection.weight, std=projection_std)
                nn.init.zeros_(projection.bias)

    def forward_head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits through the token embedding (the tied head)."""
        return F.linear(h, self.wte.weight)

    def _run(self, ids, padding_mask, cache: DecodeCache | None, cached: bool):
        past = cache.length if cache is not None else 0
        steps = ids.shape[1]
        if past + steps > self.zoo_config.n_positions:
            raise InputError(sequence_length_message(self.zoo_config.n_positions, past + steps))
        padding = joined_padding(cache.padding if cache else None, past, padding_mask, ids)
        positions = padded_positions(padding, past, steps, ids.device)
        h = self.drop(self.wte(ids) + self.wpe(positions))
        blocked = blocked_mask(steps, padding, causal=True, device=ids.device, past=past)
        presents, empty = [], KeyValueSlots.empty(self.zoo_config.n_positions)  # written in place
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled() and not cached
        for i, block in enumerate(self.h):
            if cached:
                h, present = block.forward_cached(h, blocked, cache.layers[i] if cache else empty)
                presents.append(present)
            else:
                h = checkpointed_call(block, h, blocked) if checkpointing else block(h, blocked)
        h = self.ln_f(h)
        return h, (DecodeCache(tuple(presents), padding, past + steps) if cached else None)


def build(cfg: GPT2Config) -> GPT2:
    return GPT2(cfg)
