"""Hyperparameters every recurrent family shares; a family subclasses it with its cell's own.

Recurrent nets read two kinds of input: float feature sequences ``(N, T, input_size)`` (the
8x8 digits are 8 rows of 8 features) or ``(N, T)`` token ids read through an embedding.
Classification predicts one class per sequence from either; language modeling reads token
ids and predicts the next token at every step. Batches of unequal lengths are padded at the
end and come with a ``padding_mask`` (True marks padding): torch packs them, Keras masks.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from zoo.family import MAX_CLASSES, ArchitectureConfig

CLASSIFICATION_STEPS = 8  # example_input length: the digits' rows
LANGUAGE_MODELING_STEPS = 16


class RecurrentConfig(ArchitectureConfig):
    """Fields every recurrent family has: an optional token embedding, a stack of
    recurrent layers (each one block, optionally bidirectional), and a linear head.

    Dropout acts between recurrent layers and before the head. A classifier reduces the
    sequence to one vector by ``pooling``; a language model applies the head at every step.
    """

    DATA_FIELDS = ("task", "inputs", "input_size", "num_classes", "vocab_size")

    task: Literal["classification", "language_modeling"] = Field(
        "classification",
        description="Sequence classification (one label per sequence) or next-token language modeling.",
    )
    inputs: Literal["features", "tokens"] = Field(
        "features",
        description="What a classifier reads: float features per step, or token ids through an "
        "embedding (from the data; a language model always reads token ids).",
    )
    input_size: int = Field(
        8, ge=1, le=65536, description="Features per time step of a classification input (from the data)."
    )
    num_classes: int = Field(
        10, ge=2, le=MAX_CLASSES, description="Classes of the classifier head (from the data)."
    )
    vocab_size: int = Field(
        128, ge=2, le=1_000_000, description="Token vocabulary of a language model (from the data)."
    )
    embedding_dim: int = Field(64, ge=1, le=8192, description="Width of the token embedding.")
    hidden_size: int = Field(
        128, ge=1, le=8192, description="Hidden units of each recurrent layer and direction."
    )
    num_layers: int = Field(1, ge=1, le=16, description="Stacked recurrent layers.")
    bidirectional: bool = Field(
        False,
        description="Run every layer forwards and backwards and concatenate both (classification only).",
    )
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Dropout on the embedded tokens, between recurrent layers and before the head "
        "(every non-recurrent connection, as Zaremba et al. regularise an LSTM).",
    )
    tie_embeddings: bool = Field(
        False,
        description="Language modeling: the head's weight is the token embedding (one tensor; "
        "Press & Wolf); needs embedding_dim equal to hidden_size.",
    )
    pooling: Literal["last", "mean"] = Field(
        "last",
        description="How a classifier reduces the sequence: the final state of each direction "
        "(forward at the last step, backward at the first), or the mean over steps.",
    )

    @model_validator(mode="after")
    def _check_causal(self):
        if self.bidirectional and self.task == "language_modeling":
            raise ValueError(
                "bidirectional=True cannot be used with task='language_modeling': a causal language "
                "model must not see the tokens it predicts; set bidirectional=False or "
                "task='classification'"
            )
        if self.tie_embeddings and not self.language_model:
            raise ValueError(
                "tie_embeddings=True needs task='language_modeling': only a language model's head "
                "predicts tokens; set tie_embeddings=false"
            )
        if self.tie_embeddings and self.embedding_dim != self.features:
            raise ValueError(
                f"tie_embeddings=True needs embedding_dim ({self.embedding_dim}) equal to the last "
                f"layer's width hidden_size * directions ({self.features}); set embedding_dim to "
                f"{self.features}"
            )
        return self

    @property
    def reads_tokens(self) -> bool:
        """Whether the net starts with a token embedding (a language model always does)."""
        return self.language_model or self.inputs == "tokens"

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def features(self) -> int:
        """Width of every recurrent layer's output: both directions concatenated."""
        return self.hidden_size * self.directions

    @property
    def output_size(self) -> int:
        return self.vocab_size if self.language_model else self.num_classes

    def layer_input_size(self, index: int) -> int:
        """Input width of recurrent layer ``index``."""
        if index > 0:
            return self.features
        return self.embedding_dim if self.reads_tokens else self.input_size

    def sample_shape(self) -> tuple[int, ...]:
        if self.language_model:
            return (LANGUAGE_MODELING_STEPS,)
        if self.reads_tokens:
            return (CLASSIFICATION_STEPS,)
        return (CLASSIFICATION_STEPS, self.input_size)

    def example_input(self, batch: int, seed: int = 0):
        if not self.reads_tokens:
            return super().example_input(batch, seed)
        rng = np.random.default_rng(seed)
        return rng.integers(0, self.vocab_size, size=(batch, *self.sample_shape()), dtype=np.int64)

    def task_info(self):
        info = super().task_info()
        if self.reads_tokens and not self.language_model:
            info["vocab_size"] = self.vocab_size
        return info
