"""Hyperparameters of the BERT family: transformers' ``BertConfig``, in zoo's words.

Field names follow zoo's other families where one exists (``num_layers``, ``num_heads``,
``max_len``: the shared messages name ``model.max_len``); ``architectures.bert.config_json``
maps them to and from transformers' ``config.json`` (``num_hidden_layers``,
``num_attention_heads``, ``max_position_embeddings``...).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from zoo.family import MAX_CLASSES, ArchitectureConfig

EXAMPLE_LENGTH = 8  # token ids per example sequence (tests, benchmarks): short, as big presets need
BertTask = Literal["features", "classification", "token_classification", "masked_language_modeling"]
# Which of transformers' classes each task is, and whether that class builds BertModel's pooler
# (``add_pooling_layer``): only the pooled sequence classifier and the bare BertModel have it.
HF_CLASSES: dict[str, str] = {
    "features": "BertModel",
    "classification": "BertForSequenceClassification",
    "token_classification": "BertForTokenClassification",
    "masked_language_modeling": "BertForMaskedLM",
}
POOLED_TASKS = ("features", "classification")


class BertConfig(ArchitectureConfig):
    """Word + position + token-type embeddings, ``num_layers`` post-norm blocks (attention ->
    add -> LayerNorm, then dense -> exact GELU -> dense -> add -> LayerNorm), a pooler (dense +
    tanh on the first token) and the task's head: transformers' ``BertModel`` and its
    ``BertFor*`` heads.

    ``task`` picks the output: ``features`` is ``BertModel`` (the last hidden state (N, T,
    hidden_size); the pooler output and :func:`zoo.nn.torch.heads.mean_pool` sentence embeddings
    come from the model's methods), ``classification`` a linear layer on the pooler output,
    ``token_classification`` a linear layer on every token, ``masked_language_modeling``
    transformers' MLM head whose decoder is the word embedding matrix itself (one tensor).
    """

    DATA_FIELDS = ("task", "num_classes", "vocab_size")

    architecture: Literal["bert"] = "bert"
    task: BertTask = Field(
        "features",
        description="features (the backbone: last hidden state, like BertModel), classification (pooler "
        "-> linear), token_classification (linear per token) or masked_language_modeling (tied decoder); "
        "from the data.",
    )
    vocab_size: int = Field(
        30522, ge=2, le=1_000_000, description="Rows of the word embedding (and MLM logits); from the data."
    )
    num_classes: int = Field(
        2, ge=1, le=MAX_CLASSES, description="Classes of a (token) classification head (from the data)."
    )
    hidden_size: int = Field(768, ge=1, le=16384, description="Width of the residual stream (H).")
    num_layers: int = Field(12, ge=1, le=128, description="Transformer blocks (L).")
    num_heads: int = Field(12, ge=1, le=256, description="Attention heads (A); must divide hidden_size.")
    intermediate_size: int = Field(
        3072, ge=1, le=65536, description="Hidden width of each block's feed-forward net (4H in BERT)."
    )
    max_len: int = Field(
        512,
        ge=1,
        le=65536,
        description="Rows of the position embedding: the longest input (max_position_embeddings).",
    )
    type_vocab_size: int = Field(
        2, ge=1, le=1024, description="Token types (segments A/B) the model tells apart."
    )
    layer_norm_eps: float = Field(1e-12, gt=0, le=0.1, description="LayerNorm epsilon (BERT's 1e-12).")
    hidden_dropout: float = Field(
        0.1, ge=0, lt=1, description="Dropout on embeddings and both residual branches (hidden_dropout_prob)."
    )
    attention_dropout: float = Field(
        0.1, ge=0, lt=1, description="Dropout on attention probabilities (attention_probs_dropout_prob)."
    )
    classifier_dropout: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Dropout before a classifier head; None takes hidden_dropout (as transformers).",
    )
    pad_token_id: int | None = Field(
        0,
        ge=0,
        description="The padding token's row of the word embedding: initialised to zero and never updated "
        "by the lookup (nn.Embedding's padding_idx); None for none.",
    )
    pooler: bool | None = Field(
        None,
        description="Whether the backbone has BertModel's pooler (dense + tanh on the first token). None: as "
        "transformers' class for the task (features and classification yes, the others no); a features model "
        "may leave it out (BertModel(add_pooling_layer=False)).",
    )
    initializer_range: float = Field(
        0.02, gt=0, le=1, description="Standard deviation of the normal draw of every weight matrix."
    )

    @model_validator(mode="after")
    def _check(self):
        if self.hidden_size % self.num_heads:
            fitting = [h for h in range(1, min(self.hidden_size, 256) + 1) if self.hidden_size % h == 0][-6:]
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}; each head "
                f"gets hidden_size / num_heads features: use num_heads in {', '.join(map(str, fitting))}"
            )
        if self.pooler is False and self.task == "classification":
            raise ValueError(
                "task classification reads the pooler output (BertForSequenceClassification): pooler must "
                "not be false"
            )
        if self.pooler and self.task not in POOLED_TASKS:
            raise ValueError(
                f"task {self.task} is transformers' {HF_CLASSES[self.task]}, which has no pooler: leave "
                "pooler unset (or false)"
            )
        if self.pad_token_id is not None and self.pad_token_id >= self.vocab_size:
            raise ValueError(
                f"pad_token_id {self.pad_token_id} is not a row of the {self.vocab_size}-token vocabulary; "
                f"use an id below vocab_size, or null for no padding row"
            )
        return self

    @property
    def has_pooler(self) -> bool:
        return self.task in POOLED_TASKS if self.pooler is None else self.pooler

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def head_dropout(self) -> float:
        """The dropout before a classifier: transformers' ``classifier_dropout or hidden_dropout_prob``."""
        return self.hidden_dropout if self.classifier_dropout is None else self.classifier_dropout

    def sample_shape(self) -> tuple[int, ...]:
        return (min(EXAMPLE_LENGTH, self.max_len),)

    def context_length(self) -> int:
        return self.max_len

    def example_input(self, batch: int, seed: int = 0):
        """Token ids below ``vocab_size``, whatever the task (the input is ids for every BERT task)."""
        rng = np.random.default_rng(seed)
        return rng.integers(0, self.vocab_size, size=(batch, *self.sample_shape()), dtype=np.int64)

    def task_info(self) -> dict[str, Any]:
        if self.task == "masked_language_modeling":
            return {"vocab_size": self.vocab_size}
        if self.task == "features":
            return {"hidden_size": self.hidden_size}
        return {"num_classes": self.num_classes}


def token_types_message(type_vocab_size: int) -> str:
    """Both twins refuse token types outside the token-type embedding in these words."""
    return (
        f"token_type_ids must lie in [0, {type_vocab_size}) (the model's type_vocab_size); got ids outside "
        "it: use 0 for the first segment and 1 for the second, or raise type_vocab_size"
    )


def input_shapes_message(what: str, ids_shape: tuple, got: tuple) -> str:
    return (
        f"{what} must have the token ids' shape {tuple(ids_shape)} (N, T), one entry per token; got "
        f"{tuple(got)}"
    )
