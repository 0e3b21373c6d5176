"""Hyperparameters of the recurrent families: what ``rnn`` and ``lstm`` share, and ``rnn``'s own.

Both families read the same two kinds of input: classification takes ``(N, T, input_size)``
float sequences (the 8x8 digits are 8 rows of 8 features) and predicts one class per
sequence; language modeling takes ``(N, T)`` token ids and predicts the next token at
every step.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from zoo.family import ArchitectureConfig

CLASSIFICATION_STEPS = 8  # example_input length: the digits' rows
LANGUAGE_MODELING_STEPS = 16


class RecurrentConfig(ArchitectureConfig):
    """Fields every recurrent family has: an optional token embedding, a stack of
    recurrent layers (each one block, optionally bidirectional), and a linear head.

    Dropout acts between recurrent layers and before the head. A classifier reduces the
    sequence to one vector by ``pooling``; a language model applies the head at every step.
    """

    DATA_FIELDS = ("task", "input_size", "num_classes", "vocab_size")

    task: Literal["classification", "language_modeling"] = Field(
        "classification",
        description="Sequence classification (one label per sequence) or next-token language modeling.",
    )
    input_size: int = Field(
        8, ge=1, le=65536, description="Features per time step of a classification input (from the data)."
    )
    num_classes: int = Field(10, ge=2, description="Classes of the classifier head (from the data).")
    vocab_size: int = Field(
        128, ge=2, le=1_000_000, description="Token vocabulary of a language model (from the data)."
    )
    embedding_dim: int = Field(
        64, ge=1, le=8192, description="Width of the token embedding (language modeling only)."
    )
    hidden_size: int = Field(
        128, ge=1, le=8192, description="Hidden units of each recurrent layer and direction."
    )
    num_layers: int = Field(1, ge=1, le=16, description="Stacked recurrent layers.")
    bidirectional: bool = Field(
        False,
        description="Run every layer forwards and backwards and concatenate both (classification only).",
    )
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout between recurrent layers and before the head."
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
        return self

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
        return self.embedding_dim if self.language_model else self.input_size

    def sample_shape(self) -> tuple[int, ...]:
        if self.language_model:
            return (LANGUAGE_MODELING_STEPS,)
        return (CLASSIFICATION_STEPS, self.input_size)


class RNNConfig(RecurrentConfig):
    """Elman RNN: ``h_t = act(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh)``, as ``torch.nn.RNN``."""

    architecture: Literal["rnn"] = "rnn"
    nonlinearity: Literal["tanh", "relu"] = Field("tanh", description="Activation of the recurrence.")
