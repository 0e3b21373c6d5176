"""The gpt2 family's Keras twin: the torch twin's structure, sub-layer names and arithmetic.

Every default that differs between the frameworks is set explicitly: LayerNorm epsilon
(Keras' is 1e-3) and the tanh-approximated GELU (transformers' "gelu_new"). Attention and the
MLP are zoo's shared layers (``zoo.nn.keras``); the head is a product with the token
embedding's matrix, so, as in the torch twin, there is no head variable to come untied.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.gpt2.config import GPT2Config, sequence_length_message
from zoo.nn.cache import DecodeCache, StaticCache
from zoo.nn.errors import InputError
from zoo.nn.keras import Embedding, LayerNorm, Mlp, SelfAttention, blocked_mask, require
from zoo.nn.keras.attention import joined_padding, padded_positions, static_step
from zoo.nn.keras.decoder import CausalDecoder
from zoo.nn.keras.remat import checkpointed_call


class Block(layers.Layer):
    """Pre-LN: ``x + drop(attn(ln_1(x)))``, then ``x + mlp(ln_2(x))`` (the MLP drops its output)."""

    def __init__(self, cfg: GPT2Config, **kw):
        super().__init__(**kw)
        d, std = cfg.n_embd, cfg.initializer_range
        self.ln_1 = LayerNorm(epsilon=cfg.layer_norm_epsilon)
        self.attn = SelfAttention(d, cfg.n_head, dropout=cfg.attn_dropout)
        self.attn_drop = layers.Dropout(cfg.resid_dropout)
        self.ln_2 = LayerNorm(epsilon=cfg.layer_norm_epsilon)
        self.mlp = Mlp(
            d,
            cfg.inner,
            activation="gelu_tanh",
            output_dropout=cfg.resid_dropout,
            kernel_initializer=keras.initializers.RandomNormal(stddev=std),
            bias_initializer="zeros",
        )
        # transformers' residual output projections, N(0, (std / sqrt(2 * n_layer))^2), set before
        # the variables exist (no second draw of them after the build).
        projection_std = std / (2 * cfg.n_layer) ** 0.5
        self.attn.out_proj.kernel_initializer = keras.initializers.RandomNormal(stddev=projection_std)
        self.mlp.fc2.kernel_initializer = keras.initializers.RandomNormal(stddev=projection_std)

    def build(self, input_shape):
        """Every sub-layer from the (N, T, n_embd) shape: no symbolic trace of :meth:`call`."""
        for layer in (self.ln_1, self.attn, self.ln_2, self.mlp):
            layer.build(input_shape)

    def call(self, x, blocked=None, training=False):
        x = x + self.attn_drop(self.attn(self.ln_1(x), blocked, training=training), training=training)
        return x + self.mlp(self.ln_2(x), training=training)

    def call_cached(self, x, blocked, past=None, write=None):
        """:meth:`call` in inference, reading and extending a key/value cache (``decode``), or
        writing into the ``write`` slot of a static one (``decode_step``)."""
        attended, present = self.attn.call_cached(self.ln_1(x), blocked, past, write=write)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), present


class GPT2(CausalDecoder):
    """(N, T) int token ids -> (N, T, vocab_size) logits, or the final LayerNorm's hidden states
    (N, T, n_embd) for task "features"; ``padding_mask`` and ``decode`` as in the torch twin.

    With ``grad_checkpointing`` on, training keeps only each block's input for backward and
    recomputes the block there, with the forward pass's dropout masks (``zoo.nn.keras.remat``).
    """

    model_name = "GPT-2"

    def __init__(self, cfg: GPT2Config, **kw):
        super().__init__(**kw)
        self.zoo_config = cfg
        normal = keras.initializers.RandomNormal(stddev=cfg.initializer_range)
        self.wte = Embedding(cfg.vocab_size, cfg.n_embd, embeddings_initializer=normal)
        self.wpe = layers.Embedding(
            cfg.n_positions,
            cfg.n_embd,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=cfg.initializer_range),
        )
        self.drop = layers.Dropout(cfg.embd_dropout)
        self.h = [Block(cfg) for _ in range(cfg.n_layer)]
        self.ln_f = LayerNorm(epsilon=cfg.layer_norm_epsilon)

    def build(self, ids_shape, padding_mask_shape=None, token_type_ids_shape=None):
        """The variables from the ids' shape alone: none depends on the sequence length, and an
        explicit build spares Keras' symbolic trace of the whole model before its first call."""
        hidden = (*ids_shape, self.zoo_config.n_embd)
        self.wte.build(ids_shape)
        self.wpe.build(ids_shape)
        for block in self.h:
            block.build(hidden)
        self.ln_f.build(hidden)

    def forward_head(self, h):
        """Logits through the token embedding (the tied head)."""
        return ops.matmul(h, ops.transpose(ops.cast(self.wte.embeddings, h.dtype)))

    def _run(self, ids, padding_mask, cache: DecodeCache | StaticCache | None, cached: bool, training: bool):
        if isinstance(cache, StaticCache):
            return self._run_static(ids, cache)
        limit = self.zoo_config.n_positions
        past = cache.length if cache is not None else 0
        steps = ids.shape[1]
        if steps is None:  # known only when the graph runs
            steps = ops.shape(ids)[1]
            steps, ids = require(past + steps <= limit, sequence_length_message(limit), steps, ids)
        elif past + steps > limit:
            raise InputError(sequence_length_message(limit, past + steps))
        padding = joined_padding(cache.padding if cache else None, past, padding_mask, ids)
        positions = padded_positions(padding, past, steps)
        embedded = self.wte(ids) + ops.cast(self.wpe(positions), self.compute_dtype)
        h = self.drop(embedded, training=training)
        blocked = blocked_mask(steps, padding, causal=True, past=past)
        presents = []
        checkpointing = training and self.grad_checkpointing and not cached
        for i, block in enumerate(self.h):
            if cached:
                h, present = block.call_cached(h, blocked, cache.layers[i] if cache else None)
                presents.append(present)
            elif checkpointing:
                h = checkpointed_call(block, h, blocked)
            else:
                h = block(h, blocked, training=training)
        h = self.ln_f(h)
        return h, (DecodeCache(tuple(presents), padding, past + steps) if cached else None)

    def _run_static(self, ids, cache: StaticCache):
        """One token (N, 1) written into slot ``cache.length`` of a static cache (``decode_step``):
        :meth:`_run`'s arithmetic for that token, over every slot with the unwritten ones blocked."""
        positions, blocked, write = static_step(cache.padding, cache.pads, cache.length)
        h = self.wte(ids) + ops.cast(self.wpe(positions), self.compute_dtype)
        presents = []
        for block, past in zip(self.h, cache.layers, strict=True):
            h, present = block.call_cached(h, blocked, past, write)
            presents.append(present)
        return self.ln_f(h), cache._replace(layers=tuple(presents), length=cache.length + 1)


def _init_like_transformers(model: GPT2) -> None:
    """transformers' ``_init_weights`` for the one variable zoo's shared attention creates with
    its own draw: the query/key/value projection, normal(0, 0.02) (torch's default there is
    Xavier-uniform). The residual projections got their initialisers in :class:`Block`."""
    std = model.zoo_config.initializer_range
    for block in model.h:
        variable = block.attn.in_proj_kernel
        variable.assign(keras.random.normal(tuple(variable.shape), stddev=std, dtype=variable.dtype))


def build(cfg: GPT2Config) -> GPT2:
    """Built explicitly from the input's shape, with no forward pass: no variable's shape depends
    on the sequence length, and a full-context first call cost seconds (Keras traced it twice)."""
    model = GPT2(cfg)
    model.build((None, None))
    _init_like_transformers(model)
    return model
