"""The llama family's Keras twin: the torch twin's structure, sub-layer names and arithmetic.

The decoder layers are ``blocks`` (a Keras model's ``layers`` is Keras' own list); everything
else keeps the torch twin's names. Attention, the gated MLP and RMSNorm are zoo's shared layers
(``zoo.nn.keras``); the rotary tables are computed once per call from ``zoo.nn.rotary``'s shared
frequencies. A tied head is a product with the token embedding's matrix, so, as in the torch
twin, there is no head variable to come untied. Residual sums are taken in the wider dtype
(``ops.add`` promotes): under mixed precision the stream stays float32 while the projections
return bfloat16, as torch's autocast leaves it.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.llama.config import LlamaConfig, sequence_length_message
from zoo.nn.cache import DecodeCache, StaticCache
from zoo.nn.errors import InputError
from zoo.nn.keras import (
    Dense,
    Embedding,
    GatedMlp,
    GroupedQueryAttention,
    PaddedEmbedding,
    RMSNorm,
    blocked_mask,
    require,
)
from zoo.nn.keras.attention import joined_padding, padded_positions, static_step
from zoo.nn.keras.decoder import CausalDecoder
from zoo.nn.keras.heads import TiedProduct
from zoo.nn.keras.moe import SparseMoe, load_balancing_loss
from zoo.nn.keras.remat import checkpointed_call
from zoo.nn.keras.rotary import rotary_tables


def _normal(std: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=std)


class DecoderLayer(layers.Layer):
    """Pre-norm: ``x + self_attn(input_layernorm(x))``, then ``x + mlp(post_attention_layernorm(x))``."""

    def __init__(self, cfg: LlamaConfig, moe: bool = False, **kw):
        super().__init__(**kw)
        self.routes_out = moe and cfg.output_router_logits
        d, init = cfg.hidden_size, _normal(cfg.initializer_range)
        self.input_layernorm = RMSNorm(epsilon=cfg.rms_norm_eps)
        self.self_attn = GroupedQueryAttention(
            d, cfg.num_attention_heads, cfg.key_value_heads, cfg.attention_head_dim,
            qkv_bias=cfg.qkv_bias, out_bias=cfg.output_bias, dropout=cfg.attention_dropout,
            kernel_initializer=init, qk_norm_eps=cfg.rms_norm_eps if cfg.qk_norm else None,
        )  # fmt: skip
        self.post_attention_layernorm = RMSNorm(epsilon=cfg.rms_norm_eps)
        self.mlp = (
            SparseMoe(
                d,
                cfg.expert_size,
                cfg.num_local_experts,
                cfg.num_experts_per_tok,
                cfg.norm_topk_prob,
                kernel_initializer=init,
            )
            if moe
            else GatedMlp(d, cfg.intermediate_size, bias=cfg.mlp_bias, kernel_initializer=init)
        )

    def build(self, input_shape, cos_shape=None, sin_shape=None, blocked_shape=None):
        """Every sub-layer from the (N, T, hidden_size) shape: no symbolic trace of :meth:`call`."""
        for layer in (self.input_layernorm, self.self_attn, self.post_attention_layernorm, self.mlp):
            layer.build(input_shape)

    def call(self, x, cos, sin, blocked=None, training=False):
        """The layer's output; in training, with its router's scores beside it where the model
        trains with the load-balancing loss: an output of the block, so that a recomputed block
        (gradient checkpointing) carries their gradient too."""
        x = ops.add(x, self.self_attn(self.input_layernorm(x), cos, sin, blocked, training=training))
        out = ops.add(x, self.mlp(self.post_attention_layernorm(x)))
        return (out, self.mlp.router_logits) if training and self.routes_out else out

    def call_cached(self, x, cos, sin, blocked, past=None, write=None):
        """:meth:`call` in inference, reading and extending a key/value cache (``decode``), or
        writing into the ``write`` slot of a static one (``decode_step``)."""
        normed = self.input_layernorm(x)
        attended, present = self.self_attn.call_cached(normed, cos, sin, blocked, past, write=write)
        x = ops.add(x, attended)
        return ops.add(x, self.mlp(self.post_attention_layernorm(x))), present


class Llama(CausalDecoder):
    """(N, T) int token ids -> (N, T, vocab_size) logits, or the final RMSNorm's hidden states
    (N, T, hidden_size) for task "features"; ``padding_mask`` and ``decode`` as in the torch twin.

    With ``grad_checkpointing`` on, training keeps only each decoder layer's input for backward
    and recomputes the layer there, with the forward pass's dropout masks (``zoo.nn.keras.remat``).
    """

    model_name = "Llama"

    def __init__(self, cfg: LlamaConfig, **kw):
        super().__init__(**kw)
        self.zoo_config = cfg
        d, init = cfg.hidden_size, _normal(cfg.initializer_range)
        if cfg.pad_token_id is None:
            self.embed_tokens = Embedding(cfg.vocab_size, d, embeddings_initializer=init)
        else:  # the padding row gets no gradient from the lookup, as torch's padding_idx
            self.embed_tokens = PaddedEmbedding(
                cfg.vocab_size, d, cfg.pad_token_id, embeddings_initializer=init
            )
        self.blocks = [DecoderLayer(cfg, moe) for moe in cfg.moe_layers]
        self.norm = RMSNorm(epsilon=cfg.rms_norm_eps)
        untied = cfg.active_task == "language_modeling" and not cfg.tie_word_embeddings
        self.lm_head = Dense(cfg.vocab_size, use_bias=False, kernel_initializer=init) if untied else None
        self.tied_head = None if untied else TiedProduct()
        self.inv_freq = cfg.inverse_frequencies()

    def build(self, ids_shape, padding_mask_shape=None, token_type_ids_shape=None):
        """The variables from the ids' shape alone: none depends on the sequence length, and an
        explicit build spares Keras' symbolic trace of the whole model before its first call."""
        hidden = (*ids_shape, self.zoo_config.hidden_size)
        self.embed_tokens.build(ids_shape)
        for block in self.blocks:
            block.build(hidden)
        self.norm.build(hidden)
        if self.lm_head is not None:
            self.lm_head.build(hidden)

    def forward_head(self, h):
        """Logits through ``lm_head``, or through the token embedding where the head is tied."""
        if self.lm_head is not None:
            return self.lm_head(h)
        return self.tied_head(h, self.embed_tokens.embeddings)

    def _run(self, ids, padding_mask, cache: DecodeCache | StaticCache | None, cached: bool, training: bool):
        if isinstance(cache, StaticCache):
            return self._run_static(ids, cache)
        context = self.zoo_config.max_position_embeddings
        past = cache.length if cache is not None else 0
        steps = ids.shape[1]
        if steps is None:  # known only when the graph runs
            steps = ops.shape(ids)[1]
            steps, ids = require(past + steps <= context, sequence_length_message(context), steps, ids)
        elif past + steps > context:
            raise InputError(sequence_length_message(context, past + steps))
        padding = joined_padding(cache.padding if cache else None, past, padding_mask, ids)
        h = self.embed_tokens(ids)
        cos, sin = rotary_tables(padded_positions(padding, past, steps), self.inv_freq, h.dtype)
        windows = self.zoo_config.layer_windows  # each layer's sliding window, or None
        masks = {w: blocked_mask(steps, padding, causal=True, past=past, window=w) for w in set(windows)}
        presents, routers = [], []
        checkpointing = training and self.grad_checkpointing and not cached
        for i, block in enumerate(self.blocks):
            blocked = masks[windows[i]]
            if cached:
                h, present = block.call_cached(h, cos, sin, blocked, cache.layers[i] if cache else None)
                presents.append(present)
                continue
            if checkpointing:
                h = checkpointed_call(block, h, cos, sin, blocked)
            else:
                h = block(h, cos, sin, blocked, training=training)
            if isinstance(h, tuple):  # the router's scores, for the load-balancing loss
                h, logits = h
                routers.append(logits)
        cfg = self.zoo_config
        if routers:
            balance = load_balancing_loss(routers, cfg.num_experts_per_tok, padding)
            self.add_loss(cfg.router_aux_loss_coef * balance)  # fit adds it to the loss, as the torch task
        h = self.norm(h)
        return h, (DecodeCache(tuple(presents), padding, past + steps) if cached else None)

    def _run_static(self, ids, cache: StaticCache):
        """One token (N, 1) written into slot ``cache.length`` of a static cache (``decode_step``):
        :meth:`_run`'s arithmetic for that token, over every slot with the unwritten ones blocked."""
        windows = self.zoo_config.layer_windows
        steps = {w: static_step(cache.padding, cache.pads, cache.length, w) for w in set(windows)}
        positions, _, write = steps[windows[0]]
        h = self.embed_tokens(ids)
        cos, sin = rotary_tables(positions, self.inv_freq, h.dtype)
        presents = []
        for block, past, window in zip(self.blocks, cache.layers, windows, strict=True):
            h, present = block.call_cached(h, cos, sin, steps[window][1], past, write)
            presents.append(present)
        return self.norm(h), cache._replace(layers=tuple(presents), length=cache.length + 1)


def build(cfg: LlamaConfig) -> Llama:
    """Built explicitly from the input's shape, with no forward pass: no variable's shape depends
    on the sequence length."""
    model = Llama(cfg)
    model.build((None, None))
    return model
