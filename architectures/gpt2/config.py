"""Hyperparameters of the gpt2 family: transformers' ``GPT2Config``, under zoo's names for dropout.

The architecture fields keep transformers' names (``n_embd``, ``n_layer``, ``n_head``,
``n_positions``, ``n_inner``, ``layer_norm_epsilon``), so a ``config.json`` reads across
field for field (``architectures.gpt2.formats``). The dropout rates are transformers'
``resid_pdrop``, ``embd_pdrop`` and ``attn_pdrop`` renamed ``*_dropout``, the word zoo's tools
look for when they switch dropout off.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from zoo.family import ArchitectureConfig

EXAMPLE_LENGTH = 8  # token ids in an example batch: short, so the 50k-vocabulary presets stay cheap


class GPT2Config(ArchitectureConfig):
    """Token and learned position embeddings, ``n_layer`` pre-LayerNorm blocks (causal
    self-attention with biases, a 4x MLP with tanh-approximated GELU), a final LayerNorm, and
    a language-model head tied to the token embedding: transformers' ``GPT2LMHeadModel``.

    ``task`` "features" is transformers' ``GPT2Model``: the same tensors, returning the final
    LayerNorm's hidden states (N, T, n_embd) instead of logits.
    """

    DATA_FIELDS = ("task", "vocab_size")

    architecture: Literal["gpt2"] = "gpt2"
    task: Literal["language_modeling", "features"] = Field(
        "language_modeling",
        description="Next-token logits through the tied head (GPT2LMHeadModel), or the backbone's last "
        "hidden state (GPT2Model).",
    )
    vocab_size: int = Field(
        50257, ge=2, le=1_000_000, description="Token vocabulary (from the data; GPT-2's BPE has 50257)."
    )
    n_positions: int = Field(
        1024, ge=1, le=65536, description="Longest sequence: rows of the learned position table (max_len)."
    )
    n_embd: int = Field(768, ge=1, le=16384, description="Width of the residual stream.")
    n_layer: int = Field(12, ge=1, le=128, description="Transformer blocks.")
    n_head: int = Field(12, ge=1, le=256, description="Attention heads; must divide n_embd.")
    n_inner: int | None = Field(
        None, ge=1, le=65536, description="Hidden width of each block's MLP; None is 4 * n_embd."
    )
    layer_norm_epsilon: float = Field(1e-5, gt=0, le=0.1, description="LayerNorm epsilon.")
    resid_dropout: float = Field(
        0.1, ge=0, lt=1, description="Dropout on both residual branches (transformers' resid_pdrop)."
    )
    embd_dropout: float = Field(
        0.1, ge=0, lt=1, description="Dropout on the summed embeddings (transformers' embd_pdrop)."
    )
    attn_dropout: float = Field(
        0.1, ge=0, lt=1, description="Dropout on the attention probabilities (transformers' attn_pdrop)."
    )
    initializer_range: float = Field(
        0.02, gt=0, le=1, description="Standard deviation of the normal initial weights."
    )

    @model_validator(mode="after")
    def _check(self):
        if self.n_embd % self.n_head:
            fitting = [h for h in range(1, min(self.n_embd, 256) + 1) if self.n_embd % h == 0][-6:]
            raise ValueError(
                f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}; each head gets "
                f"n_embd / n_head features: use n_head in {', '.join(map(str, fitting))}"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def inner(self) -> int:
        """The MLP's hidden width (transformers' ``n_inner or 4 * n_embd``)."""
        return self.n_inner or 4 * self.n_embd

    def sample_shape(self) -> tuple[int, ...]:
        return (min(EXAMPLE_LENGTH, self.n_positions),)

    def context_length(self) -> int:
        return self.n_positions

    def example_input(self, batch: int, seed: int = 0):
        """Token ids below ``vocab_size`` for both tasks (the features task reads ids too)."""
        rng = np.random.default_rng(seed)
        return rng.integers(0, self.vocab_size, size=(batch, *self.sample_shape()), dtype=np.int64)

    def task_info(self):
        return {"vocab_size": self.vocab_size}


def sequence_length_message(n_positions: int, steps: int | None = None) -> str:
    """Both twins refuse a sequence past the position table in these words (``steps`` is left
    out where only a graph knows it)."""
    got = f"a sequence of {steps} tokens" if steps is not None else "a longer sequence"
    return (
        f"GPT-2 reads at most n_positions {n_positions} tokens (rows of its position table); got {got}: "
        "shorten the sequence (zoo sample keeps the last n_positions tokens)"
    )
