"""The gemma family's Keras twin: the torch twin's structure, sub-layer names and arithmetic.

The decoder layers are ``blocks`` (a Keras model's ``layers`` is Keras' own list); everything
else keeps the torch twin's names. As in the llama family's Keras twin, residual sums are
taken in the wider dtype, so under mixed precision the stream stays float32.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.gemma.config import GemmaConfig, sequence_length_message
from zoo.nn.cache import DecodeCache, StaticCache
from zoo.nn.errors import InputError
from zoo.nn.keras import (
    Dense,
    Embedding,
    GatedMlp,
    GroupedQueryAttention,
    OffsetRMSNorm,
    PaddedEmbedding,
    blocked_mask,
    require,
)
from zoo.nn.keras.activations import softcap
from zoo.nn.keras.attention import joined_padding, padded_positions, static_step
from zoo.nn.keras.decoder import CausalDecoder
from zoo.nn.keras.heads import TiedProduct
from zoo.nn.keras.remat import checkpointed_call
from zoo.nn.keras.rotary import rotary_tables


def _normal(std: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=std)


class DecoderLayer(layers.Layer):
    """Norms before and after the attention and the MLP, as the torch twin's ``DecoderLayer``."""

    def __init__(self, cfg: GemmaConfig, **kw):
        super().__init__(**kw)
        d, eps, init = cfg.hidden_size, cfg.rms_norm_eps, _normal(cfg.initializer_range)
        self.input_layernorm = OffsetRMSNorm(epsilon=eps)
        self.self_attn = GroupedQueryAttention(
            d, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
            qkv_bias=cfg.attention_bias, out_bias=cfg.attention_bias, dropout=cfg.attention_dropout,
            kernel_initializer=init, qk_norm_eps=eps if cfg.qk_norm else None, norm=OffsetRMSNorm,
            scale=cfg.query_pre_attn_scalar**-0.5, softcap=cfg.attn_logit_softcapping,
        )  # fmt: skip
        self.post_attention_layernorm = OffsetRMSNorm(epsilon=eps)
        self.pre_feedforward_layernorm = OffsetRMSNorm(epsilon=eps)
        self.mlp = GatedMlp(d, cfg.intermediate_size, activation="gelu_tanh", kernel_initializer=init)
        self.post_feedforward_layernorm = OffsetRMSNorm(epsilon=eps)

    def build(self, input_shape, cos_shape=None, sin_shape=None, blocked_shape=None):
        for layer in (
            self.input_layernorm, self.self_attn, self.post_attention_layernorm,
            self.pre_feedforward_layernorm, self.mlp, self.post_feedforward_layernorm,
        ):  # fmt: skip
            layer.build(input_shape)

    def call(self, x, cos, sin, blocked=None, training=False):
        attended = self.self_attn(self.input_layernorm(x), cos, sin, blocked, training=training)
        return self._rest(x, attended)

    def call_cached(self, x, cos, sin, blocked, past=None, write=None):
        """:meth:`call` in inference over a key/value cache (``decode``), or writing into the
        ``write`` slot of a static one (``decode_step``)."""
        normed = self.input_layernorm(x)
        attended, present = self.self_attn.call_cached(normed, cos, sin, blocked, past, write=write)
        return self._rest(x, attended), present

    def _rest(self, x, attended):
        x = ops.add(x, self.post_attention_layernorm(attended))
        return ops.add(x, self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x))))


def scaled(cfg: GemmaConfig, h):
    """The embedding times sqrt(hidden_size), rounded to float32 and then to the embedding's dtype."""
    scale = ops.convert_to_tensor(cfg.hidden_size**0.5, dtype="float32")
    return ops.multiply(h, ops.cast(scale, h.dtype))


class Gemma(CausalDecoder):
    """(N, T) int token ids -> (N, T, vocab_size) logits, or the final norm's hidden states for
    task "features"; ``padding_mask``, ``decode`` and gradient checkpointing as the torch twin's."""

    model_name = "Gemma"

    def __init__(self, cfg: GemmaConfig, **kw):
        super().__init__(**kw)
        self.zoo_config = cfg
        d, init = cfg.hidden_size, _normal(cfg.initializer_range)
        if cfg.pad_token_id is None:
            self.embed_tokens = Embedding(cfg.vocab_size, d, embeddings_initializer=init)
        else:  # the padding row gets no gradient from the lookup, as torch's padding_idx
            self.embed_tokens = PaddedEmbedding(
                cfg.vocab_size, d, cfg.pad_token_id, embeddings_initializer=init
            )
        self.blocks = [DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)]
        self.norm = OffsetRMSNorm(epsilon=cfg.rms_norm_eps)
        untied = cfg.active_task == "language_modeling" and not cfg.tie_word_embeddings
        self.lm_head = Dense(cfg.vocab_size, use_bias=False, kernel_initializer=init) if untied else None
        self.tied_head = None if untied else TiedProduct()
        self.inv_freq = cfg.inverse_frequencies()

    def build(self, ids_shape, padding_mask_shape=None, token_type_ids_shape=None):
        hidden = (*ids_shape, self.zoo_config.hidden_size)
        self.embed_tokens.build(ids_shape)
        for block in self.blocks:
            block.build(hidden)
        self.norm.build(hidden)
        if self.lm_head is not None:
            self.lm_head.build(hidden)

    def forward_head(self, h):
        logits = (
            self.lm_head(h) if self.lm_head is not None else self.tied_head(h, self.embed_tokens.embeddings)
        )
        cap = self.zoo_config.final_logit_softcapping
        if cap is None:
            return logits
        return softcap(logits, cap)

    def _run(self, ids, padding_mask, cache: DecodeCache | StaticCache | None, cached: bool, training: bool):
        if isinstance(cache, StaticCache):
            return self._run_static(ids, cache)
        cfg = self.zoo_config
        context = cfg.max_position_embeddings
        past = cache.length if cache is not None else 0
        steps = ids.shape[1]
        if steps is None:  # known only when the graph runs
            steps = ops.shape(ids)[1]
            steps, ids = require(past + steps <= context, sequence_length_message(context), steps, ids)
        elif past + steps > context:
            raise InputError(sequence_length_message(context, past + steps))
        padding = joined_padding(cache.padding if cache else None, past, padding_mask, ids)
        h = scaled(cfg, self.embed_tokens(ids))
        positions = padded_positions(padding, past, steps)
        tables = {kind: rotary_tables(positions, freq, h.dtype) for kind, freq in self.inv_freq.items()}
        kinds, windows = cfg.kinds, cfg.layer_windows
        masks = {w: blocked_mask(steps, padding, causal=True, past=past, window=w) for w in set(windows)}
        presents = []
        checkpointing = training and self.grad_checkpointing and not cached
        for i, block in enumerate(self.blocks):
            (cos, sin), blocked = tables[kinds[i]], masks[windows[i]]
            if cached:
                h, present = block.call_cached(h, cos, sin, blocked, cache.layers[i] if cache else None)
                presents.append(present)
            elif checkpointing:
                h = checkpointed_call(block, h, cos, sin, blocked)
            else:
                h = block(h, cos, sin, blocked, training=training)
        h = self.norm(h)
        return h, (DecodeCache(tuple(presents), padding, past + steps) if cached else None)

    def _run_static(self, ids, cache: StaticCache):
        """One token (N, 1) written into slot ``cache.length`` of a static cache (``decode_step``)."""
        cfg = self.zoo_config
        kinds, windows = cfg.kinds, cfg.layer_windows
        steps = {w: static_step(cache.padding, cache.pads, cache.length, w) for w in set(windows)}
        positions, _, write = steps[windows[0]]
        h = scaled(cfg, self.embed_tokens(ids))
        tables = {kind: rotary_tables(positions, freq, h.dtype) for kind, freq in self.inv_freq.items()}
        presents = []
        for block, past, kind, window in zip(self.blocks, cache.layers, kinds, windows, strict=True):
            h, present = block.call_cached(h, *tables[kind], steps[window][1], past, write)
            presents.append(present)
        return self.norm(h), cache._replace(layers=tuple(presents), length=cache.length + 1)


def build(cfg: GemmaConfig) -> Gemma:
    """Built explicitly from the input's shape, with no forward pass."""
    model = Gemma(cfg)
    model.build((None, None))
    return model
