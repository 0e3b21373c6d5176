"""The llama family's torch twin: transformers' ``LlamaForCausalLM`` (and ``LlamaModel``), written out.

Module and tensor names are transformers' (``embed_tokens``, ``layers.N.self_attn.q_proj``,
``layers.N.mlp.gate_proj``, ``layers.N.input_layernorm``, ``norm``, ``lm_head``) without the
``model.`` prefix, built from zoo's shared blocks: ``zoo.nn.torch.GroupedQueryAttention``,
``GatedMlp``, ``RMSNorm`` and the rotary tables of ``zoo.nn.torch.rotary``. A tied head is
``F.linear(h, embed_tokens.weight)``: no tensor of its own, so the tie cannot come undone and
the checkpoint holds the matrix once.

Initialised as transformers' ``PreTrainedModel._init_weights``: normal(0, initializer_range) for
every projection, the embedding and an untied head, zero biases, the padding token's embedding
row zero, RMSNorm scales one. No dropout but on the attention probabilities (transformers has
no other).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from architectures.llama.config import LlamaConfig, sequence_length_message
from zoo.nn.cache import DecodeCache, KeyValueSlots
from zoo.nn.errors import InputError
from zoo.nn.torch import Embedding, GatedMlp, GroupedQueryAttention, RMSNorm, blocked_mask
from zoo.nn.torch.attention import joined_padding, padded_positions
from zoo.nn.torch.decoder import CausalDecoder
from zoo.nn.torch.init import transformers_init_
from zoo.nn.torch.moe import SparseMoe, load_balancing_loss
from zoo.nn.torch.remat import checkpointed_call
from zoo.nn.torch.rotary import rotary_tables


class DecoderLayer(nn.Module):
    """Pre-norm: ``x + self_attn(input_layernorm(x))``, then ``x + mlp(post_attention_layernorm(x))``."""

    def __init__(self, cfg: LlamaConfig, moe: bool = False):
        super().__init__()
        d = cfg.hidden_size
        self.input_layernorm = RMSNorm(d, eps=cfg.rms_norm_eps)
        self.self_attn = GroupedQueryAttention(
            d, cfg.num_attention_heads, cfg.key_value_heads, cfg.attention_head_dim,
            qkv_bias=cfg.qkv_bias, out_bias=cfg.output_bias, dropout=cfg.attention_dropout,
            qk_norm_eps=cfg.rms_norm_eps if cfg.qk_norm else None,
        )  # fmt: skip
        self.post_attention_layernorm = RMSNorm(d, eps=cfg.rms_norm_eps)
        self.mlp = (
            SparseMoe(d, cfg.expert_size, cfg.num_local_experts, cfg.num_experts_per_tok, cfg.norm_topk_prob)
            if moe
            else GatedMlp(d, cfg.intermediate_size, activation="silu", bias=cfg.mlp_bias)
        )

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, blocked: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, blocked)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_cached(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        blocked: torch.Tensor | None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`forward`, reading and extending a key/value cache (``decode``)."""
        attended, present = self.self_attn.forward_cached(self.input_layernorm(x), cos, sin, blocked, past)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), present


class Llama(CausalDecoder):
    """(N, T) int64 token ids -> (N, T, vocab_size) logits (task "language_modeling") or the final
    RMSNorm's hidden states (N, T, hidden_size) (task "features").

    ``padding_mask`` (N, T) bool marks padding with True: no real token attends to a padding
    token, and positions count only the real tokens before a token, so a left-padded prompt
    gives the logits of the same prompt unpadded (the position ids transformers' ``generate``
    derives from the attention mask). ``decode`` reads a prompt, then one token per call,
    through a key/value cache. With ``grad_checkpointing`` on, training keeps only each decoder
    layer's input for backward.
    """

    model_name = "Llama"
    auxiliary_loss: torch.Tensor | None = None  # the last training forward's load-balancing term

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.zoo_config = cfg
        d = cfg.hidden_size
        self.embed_tokens = Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(cfg, moe) for moe in cfg.moe_layers)
        self.norm = RMSNorm(d, eps=cfg.rms_norm_eps)
        untied = cfg.active_task == "language_modeling" and not cfg.tie_word_embeddings
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False) if untied else None
        self.inv_freq = cfg.inverse_frequencies()  # numpy: no buffer a dtype cast or the meta device touches
        self.init_weights()

    def init_weights(self) -> None:
        """transformers' ``_init_weights`` (the shared blocks draw torch's defaults)."""
        transformers_init_(self, self.zoo_config.initializer_range, self.embed_tokens)

    def forward_head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits through ``lm_head``, or through the token embedding where the head is tied."""
        return self.lm_head(h) if self.lm_head is not None else F.linear(h, self.embed_tokens.weight)

    def _run(self, ids, padding_mask, cache: DecodeCache | None, cached: bool):
        past = cache.length if cache is not None else 0
        steps = ids.shape[1]
        context = self.zoo_config.max_position_embeddings
        if past + steps > context:
            raise InputError(sequence_length_message(context, past + steps))
        padding = joined_padding(cache.padding if cache else None, past, padding_mask, ids)
        h = self.embed_tokens(ids)
        cos, sin = rotary_tables(padded_positions(padding, past, steps, ids.device), self.inv_freq, h.dtype)
        windows = self.zoo_config.layer_windows  # each layer's sliding window, or None
        masks = {
            window: blocked_mask(steps, padding, causal=True, device=ids.device, past=past, window=window)
            for window in set(windows)
        }
        presents, empty = [], KeyValueSlots.empty(context)  # slots written in place
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled() and not cached
        for i, layer in enumerate(self.layers):
            blocked = masks[windows[i]]
            if cached:
                h, present = layer.forward_cached(h, cos, sin, blocked, cache.layers[i] if cache else empty)
                presents.append(present)
            else:
                h = (
                    checkpointed_call(layer, h, cos, sin, blocked)
                    if checkpointing
                    else layer(h, cos, sin, blocked)
                )
        self.auxiliary_loss = self._load_balancing(padding) if self.training and not cached else None
        h = self.norm(h)
        return h, (DecodeCache(tuple(presents), padding, past + steps) if cached else None)

    def _load_balancing(self, padding) -> torch.Tensor | None:
        """``router_aux_loss_coef`` times the load-balancing loss of this forward's routers, where
        the config trains with it (``output_router_logits``); the task adds it to the loss."""
        cfg = self.zoo_config
        if not cfg.output_router_logits or not any(cfg.moe_layers):
            return None
        logits = [layer.mlp.router_logits for layer in self.layers if isinstance(layer.mlp, SparseMoe)]
        return cfg.router_aux_loss_coef * load_balancing_loss(logits, cfg.num_experts_per_tok, padding)


def build(cfg: LlamaConfig) -> Llama:
    return Llama(cfg)
