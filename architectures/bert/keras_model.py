"""The BERT family's Keras twin: the torch twin's structure, names and arithmetic order.

Every default that differs between the frameworks is set explicitly: LayerNorm epsilon (BERT's
1e-12; Keras' is 1e-3) computed in torch's order (``zoo.nn.keras.LayerNorm``: Keras' own
loses digits to cancellation at that epsilon), exact GELU (``zoo.nn.keras.Mlp``), and the
padding row of the word embedding, which torch's ``padding_idx`` keeps out of the lookup's
gradient: here the looked-up vectors of padding ids are cut from the gradient
(``stop_gradient``), which leaves that row exactly the gradient torch gives it (the tied MLM
decoder still updates it, in both twins).
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.bert.config import BertConfig, input_shapes_message, token_types_message
from zoo.nn.errors import InputError, sequence_length_message
from zoo.nn.keras import Dense, LayerNorm, Mlp, PaddedEmbedding, SelfAttention, blocked_mask, require
from zoo.nn.keras.heads import ClassificationHead, MaskedLMHead, mean_pool
from zoo.nn.keras.remat import checkpointed_call


def _normal(std: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=std)


class Embeddings(layers.Layer):
    """(N, T) ids -> (N, T, H): word + token type + position, LayerNorm, dropout."""

    def __init__(self, cfg: BertConfig, **kw):
        super().__init__(**kw)
        h, init = cfg.hidden_size, _normal(cfg.initializer_range)
        self.type_vocab_size = cfg.type_vocab_size
        self.word = PaddedEmbedding(cfg.vocab_size, h, cfg.pad_token_id, embeddings_initializer=init)
        self.position = layers.Embedding(
            cfg.max_len, h, embeddings_initializer=_normal(cfg.initializer_range)
        )
        self.token_type = layers.Embedding(
            cfg.type_vocab_size, h, embeddings_initializer=_normal(cfg.initializer_range)
        )
        self.norm = LayerNorm(epsilon=cfg.layer_norm_eps)
        self.dropout = layers.Dropout(cfg.hidden_dropout)

    def build(self, ids_shape, token_type_ids_shape=None):
        """Every table and the norm from the ids' shape: none depends on the sequence length."""
        for table in (self.word, self.position, self.token_type):
            table.build(ids_shape)
        self.norm.build((*ids_shape, self.word.output_dim))

    def call(self, ids, token_type_ids=None, training=False):
        steps = ids.shape[1] if ids.shape[1] is not None else ops.shape(ids)[1]
        if token_type_ids is None:
            types = ops.zeros_like(ids)
        else:
            types = ops.convert_to_tensor(token_type_ids)
            inside = ops.all(ops.logical_and(types >= 0, types < self.type_vocab_size))
            types = require(inside, token_types_message(self.type_vocab_size), types)
        x = self.word(ids) + self.token_type(types)  # transformers' order of the sums
        x = x + ops.cast(self.position(ops.arange(steps)), x.dtype)
        return self.dropout(self.norm(x), training=training)


class Block(layers.Layer):
    """Post-norm: ``norm1(x + attention(x))``, then ``norm2(x + mlp(x))``."""

    def __init__(self, cfg: BertConfig, **kw):
        super().__init__(**kw)
        h, init = cfg.hidden_size, cfg.initializer_range
        self.attn = SelfAttention(h, cfg.num_heads, dropout=cfg.attention_dropout)
        # transformers' Linear draw, N(0, initializer_range^2), in place of nn.Linear's default
        self.attn.out_proj.kernel_initializer = _normal(init)
        self.dropout = layers.Dropout(cfg.hidden_dropout)
        self.norm1 = LayerNorm(epsilon=cfg.layer_norm_eps)
        self.mlp = Mlp(
            h,
            cfg.intermediate_size,
            activation="gelu",
            output_dropout=cfg.hidden_dropout,
            kernel_initializer=_normal(init),
            bias_initializer="zeros",
        )
        self.norm2 = LayerNorm(epsilon=cfg.layer_norm_eps)

    def build(self, input_shape):
        """Every sub-layer from the (N, T, H) shape: no symbolic trace of :meth:`call`."""
        for layer in (self.attn, self.norm1, self.mlp, self.norm2):
            layer.build(input_shape)

    def call(self, x, blocked=None, training=False):
        x = self.norm1(x + self.dropout(self.attn(x, blocked, training=training), training=training))
        return self.norm2(x + self.mlp(x, training=training))


class Bert(keras.Model):
    """(N, T) integer token ids -> the task's output, as the torch twin (see there):
    the last hidden state, (N, num_classes), (N, T, num_classes) or (N, T, vocab_size) logits.

    ``call(ids, padding_mask=None, token_type_ids=None, training=False)``: ``padding_mask`` (N, T)
    bool, True at padding; ``token_type_ids`` (N, T) ints, zeros when left out. Bad input is
    refused with the torch twin's :class:`zoo.nn.errors.InputError` (inside a graph: the step
    fails with its message).

    With ``grad_checkpointing`` on, training keeps only each block's input for backward and
    recomputes the block there, with the forward pass's dropout masks (``zoo.nn.keras.remat``).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: BertConfig, **kw):
        super().__init__(**kw)
        self.zoo_config = cfg
        h, std = cfg.hidden_size, cfg.initializer_range
        self.embeddings = Embeddings(cfg)
        self.blocks = [Block(cfg) for _ in range(cfg.num_layers)]
        self.pooler = (
            Dense(h, kernel_initializer=_normal(std), bias_initializer="zeros") if cfg.has_pooler else None
        )
        if cfg.task in ("classification", "token_classification"):
            self.head = ClassificationHead(cfg.num_classes, cfg.head_dropout, init_std=std)
        elif cfg.task == "masked_language_modeling":
            self.head = MaskedLMHead(h, cfg.vocab_size, cfg.layer_norm_eps, init_std=std)
        else:
            self.head = None

    def build(self, ids_shape, padding_mask_shape=None, token_type_ids_shape=None):
        """Every layer from the ids' shape, the pooler included (a features model's call never
        reaches it): no variable depends on the sequence length, and an explicit build spares
        Keras' symbolic trace of the whole model before its first call."""
        hidden = (*ids_shape, self.zoo_config.hidden_size)
        self.embeddings.build(ids_shape)
        for block in self.blocks:
            block.build(hidden)
        if self.pooler is not None:
            self.pooler.build((None, self.zoo_config.hidden_size))
        if isinstance(self.head, MaskedLMHead):
            self.head.build(hidden)
        elif self.head is not None:
            self.head.build((None, self.zoo_config.hidden_size))

    def forward_features(self, ids, padding_mask=None, token_type_ids=None, training=False):
        """The last hidden state (N, T, H): ``BertModel``'s ``last_hidden_state``."""
        ids = self._checked(ids, padding_mask, token_type_ids)
        steps = ids.shape[1] if ids.shape[1] is not None else ops.shape(ids)[1]
        h = self.embeddings(ids, token_type_ids, training=training)
        blocked = blocked_mask(steps, padding_mask)
        checkpointing = training and self.grad_checkpointing
        for block in self.blocks:
            h = (
                checkpointed_call(block, h, blocked)
                if checkpointing
                else block(h, blocked, training=training)
            )
        return h

    def pool(self, h):
        """The pooler output (N, H): tanh(dense(first token)), ``BertModel``'s ``pooler_output``."""
        if self.pooler is None:
            raise ValueError(
                f"this {self.zoo_config.task} model has no pooler (transformers' "
                "BertFor{TokenClassification,MaskedLM} have none); use mean_pool for a sentence embedding"
            )
        return ops.tanh(self.pooler(h[:, 0]))

    def mean_pool(self, h, padding_mask=None):
        """A sentence embedding (N, H): the mean of the real tokens' hidden states."""
        return mean_pool(h, padding_mask)

    def forward_head(self, h, training=False):
        task = self.zoo_config.task
        if task == "features":
            return h
        if task == "classification":
            return self.head(self.pool(h), training=training)
        if task == "masked_language_modeling":
            return self.head(h, self.embeddings.word.embeddings)
        return self.head(h, training=training)

    def call(self, ids, padding_mask=None, token_type_ids=None, training=False):
        h = self.forward_features(ids, padding_mask, token_type_ids, training=training)
        return self.forward_head(h, training=training)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def _checked(self, ids, padding_mask, token_type_ids):
        cfg = self.zoo_config
        ids = ops.convert_to_tensor(ids)
        if len(ids.shape) != 2:
            raise InputError(f"token ids must be (N, T) integers; got shape {tuple(ids.shape)}")
        for what, extra in (("padding_mask", padding_mask), ("token_type_ids", token_type_ids)):
            if (
                extra is not None
                and None not in (*ids.shape, *extra.shape)
                and tuple(extra.shape) != tuple(ids.shape)
            ):
                raise InputError(input_shapes_message(what, ids.shape, extra.shape))
        steps = ids.shape[1]
        if steps is None:  # known only when the graph runs
            return require(ops.shape(ids)[1] <= cfg.max_len, sequence_length_message(cfg.max_len), ids)
        if steps > cfg.max_len:
            raise InputError(sequence_length_message(cfg.max_len, steps))
        return ids


def _init_attention_like_transformers(model: Bert) -> None:
    """transformers draws the query/key/value projection from N(0, initializer_range^2); zoo's
    shared Keras attention creates it with ``nn.MultiheadAttention``'s Xavier-uniform, so it is
    redrawn here (the output projection got its initialiser in :class:`Block`)."""
    std = model.zoo_config.initializer_range
    for block in model.blocks:
        variable = block.attn.in_proj_kernel
        variable.assign(keras.random.normal(tuple(variable.shape), stddev=std, dtype=variable.dtype))


def build(cfg: BertConfig) -> Bert:
    """Built explicitly from the input's shape, with no forward pass: no variable's shape depends
    on the sequence length, and a full-context first call cost seconds (Keras traced it twice)."""
    model = Bert(cfg)
    model.build((None, None))
    _init_attention_like_transformers(model)
    return model
