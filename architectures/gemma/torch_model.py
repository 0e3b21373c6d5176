"""The gemma family's torch twin: transformers' ``Gemma3ForCausalLM`` (``Gemma2ForCausalLM``), written out.

Module and tensor names are transformers' (``embed_tokens``, ``layers.N.self_attn.q_proj``,
``layers.N.pre_feedforward_layernorm``, ``norm``, ``lm_head``) without the ``model.`` prefix,
built from zoo's shared blocks: ``GroupedQueryAttention`` (with Gemma's query scale, soft cap
and ``OffsetRMSNorm`` query/key norms), ``GatedMlp`` with the tanh GELU, ``OffsetRMSNorm``.
The embedding is scaled by sqrt(hidden_size) rounded to float32 and then to the embedding's
dtype, as transformers' ``Gemma3TextScaledWordEmbedding``. Each kind of layer turns its
queries and keys by its own rotary table (Gemma 3's local and global bases).

Initialised as transformers' ``_init_weights``: normal(0, initializer_range) for every
projection, the embedding and an untied head, zero biases, the padding row zero, the norms'
weights zero (a scale of one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from architectures.gemma.config import GemmaConfig, sequence_length_message
from zoo.nn.cache import DecodeCache, KeyValueSlots
from zoo.nn.errors import InputError
from zoo.nn.torch import Embedding, GatedMlp, GroupedQueryAttention, OffsetRMSNorm, blocked_mask
from zoo.nn.torch.attention import joined_padding, padded_positions
from zoo.nn.torch.decoder import CausalDecoder
from zoo.nn.torch.init import transformers_init_
from zoo.nn.torch.remat import checkpointed_call
from zoo.nn.torch.rotary import rotary_tables


class DecoderLayer(nn.Module):
    """``x + post_attention_layernorm(self_attn(input_layernorm(x)))``, then
    ``x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))``."""

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = OffsetRMSNorm(d, eps=eps)
        self.self_attn = GroupedQueryAttention(
            d, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
            qkv_bias=cfg.attention_bias, out_bias=cfg.attention_bias, dropout=cfg.attention_dropout,
            qk_norm_eps=eps if cfg.qk_norm else None, norm=OffsetRMSNorm,
            scale=cfg.query_pre_attn_scalar**-0.5, softcap=cfg.attn_logit_softcapping,
        )  # fmt: skip
        self.post_attention_layernorm = OffsetRMSNorm(d, eps=eps)
        self.pre_feedforward_layernorm = OffsetRMSNorm(d, eps=eps)
        self.mlp = GatedMlp(d, cfg.intermediate_size, activation="gelu_tanh")
        self.post_feedforward_layernorm = OffsetRMSNorm(d, eps=eps)

    def forward(self, x, cos, sin, blocked=None):
        return self.forward_cached(x, cos, sin, blocked)[0]

    def forward_cached(self, x, cos, sin, blocked, past=None):
        """:meth:`forward`, reading and extending a key/value cache (``decode``)."""
        attended, present = self.self_attn.forward_cached(self.input_layernorm(x), cos, sin, blocked, past)
        x = x + self.post_attention_layernorm(attended)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x))), present


def embedding_scale(cfg: GemmaConfig, dtype: torch.dtype) -> torch.Tensor:
    """sqrt(hidden_size) as transformers holds it: a float32 scalar, cast to the embedding's dtype."""
    return torch.tensor(cfg.hidden_size**0.5, dtype=torch.float32).to(dtype)


class Gemma(CausalDecoder):
    """(N, T) int64 token ids -> (N, T, vocab_size) logits (soft-capped where
    ``final_logit_softcapping`` says), or the final norm's hidden states (task "features");
    ``padding_mask``, ``decode`` and ``grad_checkpointing`` as the llama family's."""

    model_name = "Gemma"

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.zoo_config = cfg
        d = cfg.hidden_size
        self.embed_tokens = Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = OffsetRMSNorm(d, eps=cfg.rms_norm_eps)
        untied = cfg.active_task == "language_modeling" and not cfg.tie_word_embeddings
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False) if untied else None
        self.inv_freq = cfg.inverse_frequencies()  # numpy, per kind of layer
        self.init_weights()

    def init_weights(self) -> None:
        """transformers' ``_init_weights`` (the shared blocks draw torch's defaults)."""
        transformers_init_(self, self.zoo_config.initializer_range, self.embed_tokens)

    def forward_head(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(h) if self.lm_head is not None else F.linear(h, self.embed_tokens.weight)
        cap = self.zoo_config.final_logit_softcapping
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def _run(self, ids, padding_mask, cache: DecodeCache | None, cached: bool):
        cfg = self.zoo_config
        past = cache.length if cache is not None else 0
        steps = ids.shape[1]
        if past + steps > cfg.max_position_embeddings:
            raise InputError(sequence_length_message(cfg.max_position_embeddings, past + steps))
        padding = joined_padding(cache.padding if cache else None, past, padding_mask, ids)
        h = self.embed_tokens(ids)
        h = h * embedding_scale(cfg, h.dtype)
        positions = padded_positions(padding, past, steps, ids.device)
        tables = {kind: rotary_tables(positions, freq, h.dtype) for kind, freq in self.inv_freq.items()}
        kinds, windows = cfg.kinds, cfg.layer_windows
        masks = {
            window: blocked_mask(steps, padding, causal=True, device=ids.device, past=past, window=window)
            for window in set(windows)
        }
        presents, empty = [], KeyValueSlots.empty(cfg.max_position_embeddings)
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled() and not cached
        for i, layer in enumerate(self.layers):
            (cos, sin), blocked = tables[kinds[i]], masks[windows[i]]
            if cached:
                h, present = layer.forward_cached(h, cos, sin, blocked, cache.layers[i] if cache else empty)
                presents.append(present)
            elif checkpointing:
                h = checkpointed_call(layer, h, cos, sin, blocked)
            else:
                h = layer(h, cos, sin, blocked)
        h = self.norm(h)
        return h, (DecodeCache(tuple(presents), padding, past + steps) if cached else None)


def build(cfg: GemmaConfig) -> Gemma:
    return Gemma(cfg)
