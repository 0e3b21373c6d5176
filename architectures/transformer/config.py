"""Hyperparameters of the transformer family: an encoder classifier and a causal LM from one config."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, PositiveInt, model_validator

from zoo.family import MAX_CLASSES, ArchitectureConfig

CLASSIFICATION_STEPS = 8  # the digits read as 8 rows of 8 features
LM_EXAMPLE_LENGTH = 16  # token ids in an example language-modelling batch


class TransformerConfig(ArchitectureConfig):
    """Input embedding + positions, ``num_layers`` attention blocks, and a linear head.

    ``task`` picks the two ends: a classifier reads (N, T, input_size) features through a
    Linear, attends in both directions and pools over time; a language model reads
    (N, T) token ids through an Embedding, attends causally and predicts every next token.
    Pre-norm blocks (``norm_first``) get a final LayerNorm before the head.
    """

    DATA_FIELDS = ("task", "input_size", "num_classes", "vocab_size")

    architecture: Literal["transformer"] = "transformer"
    task: Literal["classification", "language_modeling"] = Field(
        "classification",
        description="Sequence classification (bidirectional) or next-token prediction (causal); "
        "from the data.",
    )
    input_size: PositiveInt = Field(
        8, le=65536, description="Features per time step of a classification input (from the data)."
    )
    num_classes: int = Field(
        10, ge=2, le=MAX_CLASSES, description="Classes of the classifier head (from the data)."
    )
    vocab_size: int = Field(
        128, ge=2, le=1_000_000, description="Token vocabulary of a language model (from the data)."
    )
    d_model: int = Field(64, ge=2, le=8192, description="Width of the residual stream.")
    num_heads: int = Field(4, ge=1, le=128, description="Attention heads; must divide d_model.")
    num_layers: int = Field(2, ge=1, le=64, description="Transformer blocks.")
    ff_dim: int = Field(256, ge=1, le=65536, description="Hidden width of each block's feed-forward net.")
    dropout: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="Dropout on embeddings, attention weights, the feed-forward hidden layer and "
        "both residual branches.",
    )
    activation: Literal["gelu", "relu"] = Field(
        "gelu", description="Feed-forward activation (gelu is the exact erf form in both twins)."
    )
    norm_first: bool = Field(
        True, description="Pre-norm blocks (LayerNorm before each sublayer, plus a final one) or post-norm."
    )
    layer_norm_eps: float = Field(1e-5, gt=0, le=0.1, description="LayerNorm epsilon (torch's default).")
    positions: Literal["learned", "sinusoidal"] = Field(
        "learned", description="Learned position embeddings, or the fixed sine/cosine table."
    )
    max_len: int = Field(
        256, ge=1, le=65536, description="Longest sequence the positions cover (rows of the table)."
    )
    pooling: Literal["mean", "first"] = Field(
        "mean",
        description="Classification only: average over non-padding steps, or take the first step.",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}; "
                "each head gets d_model / num_heads features"
            )
        if self.max_len < self.example_length():
            raise ValueError(
                f"max_len {self.max_len} is shorter than a {self.task} example sequence "
                f"({self.example_length()} steps); raise max_len"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def causal(self) -> bool:
        """Language models attend only to the past; classifiers see the whole sequence."""
        return self.language_model

    @property
    def outputs(self) -> int:
        """Width of the head: classes, or one logit per vocabulary entry."""
        return self.vocab_size if self.causal else self.num_classes

    def example_length(self) -> int:
        return LM_EXAMPLE_LENGTH if self.causal else CLASSIFICATION_STEPS

    def sample_shape(self) -> tuple[int, ...]:
        if self.causal:
            return (LM_EXAMPLE_LENGTH,)
        return (CLASSIFICATION_STEPS, self.input_size)

    def context_length(self) -> int:
        return self.max_len

    def sinusoidal_table(self) -> np.ndarray:
        """The fixed (max_len, d_model) sine/cosine positions, computed once in numpy.

        Both twins take this very array, so sinusoidal positions agree bit for bit; an odd
        ``d_model`` leaves its last column a sine.
        """
        position = np.arange(self.max_len, dtype=np.float64)[:, None]
        frequency = np.exp(np.arange(0, self.d_model, 2) * (-math.log(10000.0) / self.d_model))
        table = np.zeros((self.max_len, self.d_model), dtype=np.float64)
        table[:, 0::2] = np.sin(position * frequency)
        table[:, 1::2] = np.cos(position * frequency)[:, : self.d_model // 2]
        return table.astype(np.float32)
