"""Hyperparameters of the gemma family: transformers' ``Gemma3TextConfig`` and ``Gemma2Config``,
under transformers' field names.

Gemma 2 and Gemma 3 are one decoder: the embedding scaled by sqrt(hidden_size), RMSNorms that
scale by ``1 + weight``, a norm before and after both the attention and the MLP ("sandwich"),
a GeGLU MLP (tanh-approximated GELU), grouped-query attention scaled by
``query_pre_attn_scalar ** -0.5`` (not the head width's), sliding-window layers among global
ones (``layer_types``, or every ``sliding_window_pattern``-th layer global). Gemma 3 adds an
RMSNorm on each head's query and key (``qk_norm``) and its own rotary base on the sliding
layers (``rope_local_base_freq``; the global layers take ``rope_theta`` and ``rope_scaling``);
Gemma 2 soft-caps the attention scores and the logits (``attn_logit_softcapping``,
``final_logit_softcapping``). ``model_type`` remembers which transformers class the weights
come from and are exported as; the twins compute what the fields say, and an export refuses
a config its class cannot hold (``architectures.gemma.config_json``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from zoo.family import ArchitectureConfig
from zoo.nn import rotary

EXAMPLE_LENGTH = 8  # token ids in an example batch: short, so the large-vocabulary presets stay cheap
LayerType = Literal["full_attention", "sliding_attention"]


class LinearRopeScaling(BaseModel):
    """transformers' ``rope_scaling`` of type ``linear`` (Gemma 3 4B and up, on the global
    layers): every rotary frequency divided by ``factor``."""

    model_config = ConfigDict(extra="forbid")

    rope_type: Literal["linear"] = Field("linear", description="The only scaling Gemma's configs use.")
    factor: float = Field(8.0, ge=1, le=1024, description="Divisor of the rotary frequencies.")


class GemmaConfig(ArchitectureConfig):
    """Scaled token embedding, ``num_hidden_layers`` decoder layers (norm -> attention -> norm
    -> add; norm -> GeGLU MLP -> norm -> add), a final norm and a head tied to the embedding
    (or a matrix of its own): transformers' ``Gemma3ForCausalLM`` (``Gemma2ForCausalLM``).

    ``task`` "features" is the base model (``Gemma3TextModel`` / ``Gemma2Model``): the final
    norm's hidden states. The defaults are Gemma 3 270M's shape, the vocabulary from the data.
    """

    DATA_FIELDS = ("task", "vocab_size")

    architecture: Literal["gemma"] = "gemma"
    task: Literal["language_modeling", "features"] = Field(
        "language_modeling",
        description="Next-token logits (Gemma3ForCausalLM), or the last hidden state (Gemma3TextModel).",
    )
    model_type: Literal["gemma3_text", "gemma2"] = Field(
        "gemma3_text",
        description="The transformers class of these weights (config.json's model_type), used by zoo export "
        "--format hf; the computation follows the fields.",
    )
    vocab_size: int = Field(262144, ge=2, le=1_000_000, description="Token vocabulary (from the data).")
    hidden_size: int = Field(640, ge=1, le=65536, description="Width of the residual stream.")
    intermediate_size: int = Field(2048, ge=1, le=262144, description="Hidden width of each GeGLU MLP.")
    num_hidden_layers: int = Field(18, ge=1, le=256, description="Decoder layers.")
    num_attention_heads: int = Field(4, ge=1, le=256, description="Query heads.")
    num_key_value_heads: int = Field(
        1, ge=1, le=256, description="Key/value heads, each shared by num_attention_heads / this query heads."
    )
    head_dim: int = Field(
        256, ge=2, le=1024, description="Features per head (even; Gemma's own, not derived)."
    )
    hidden_activation: Literal["gelu_pytorch_tanh"] = Field(
        "gelu_pytorch_tanh", description="The MLP's gate activation: GELU, tanh-approximated."
    )
    max_position_embeddings: int = Field(
        32768, ge=1, le=10_000_000, description="Longest sequence the model reads (its context)."
    )
    rms_norm_eps: float = Field(1e-6, gt=0, le=0.1, description="RMSNorm epsilon.")
    rope_theta: float = Field(
        1_000_000.0,
        gt=0,
        le=1e12,
        description="Rotary base wavelength of the global (full-attention) layers.",
    )
    rope_local_base_freq: float = Field(
        10000.0,
        gt=0,
        le=1e12,
        description="Rotary base wavelength of the sliding-window layers (Gemma 3's; Gemma 2's equals "
        "rope_theta).",
    )
    rope_scaling: LinearRopeScaling | None = Field(
        None, description="Rotary scaling of the global layers: null, or linear (Gemma 3 4B and up)."
    )
    query_pre_attn_scalar: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Attention scores are scaled by this ** -0.5 (not by the head width's).",
    )
    sliding_window: int | None = Field(
        512,
        ge=1,
        le=10_000_000,
        description="Each token of a sliding-window layer attends to itself and the sliding_window - 1 "
        "before it.",
    )
    sliding_window_pattern: int = Field(
        6,
        ge=1,
        le=1024,
        description="Where layer_types is null: every this-many-th layer is global, the others sliding "
        "(Gemma 3: 6; Gemma 2: 2).",
    )
    layer_types: list[LayerType] | None = Field(
        None,
        max_length=1024,
        description="Each layer's attention, full_attention or sliding_attention (transformers' "
        "layer_types); null: from sliding_window_pattern.",
    )
    attn_logit_softcapping: float | None = Field(
        None, gt=0, le=1e6, description="Attention scores capped to (-c, c) by c * tanh(s / c) (Gemma 2: 50)."
    )
    final_logit_softcapping: float | None = Field(
        None, gt=0, le=1e6, description="Logits capped to (-c, c) by c * tanh(l / c) (Gemma 2: 30)."
    )
    qk_norm: bool = Field(
        True, description="An RMSNorm (1 + w) on each head's query and key before the rotation (Gemma 3's)."
    )
    attention_bias: bool = Field(False, description="Biases on the four attention projections.")
    attention_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the attention probabilities.")
    initializer_range: float = Field(
        0.02, gt=0, le=1, description="Standard deviation of the normal initial weights."
    )
    tie_word_embeddings: bool = Field(
        True, description="The LM head is the token embedding (one matrix); false: a head matrix of its own."
    )
    bos_token_id: int | None = Field(
        None, ge=0, description="Beginning-of-text token id (config.json's, kept)."
    )
    eos_token_id: int | list[int] | None = Field(
        None, description="End-of-text token id(s) (config.json's, kept; generation stops there)."
    )
    pad_token_id: int | None = Field(
        None,
        ge=0,
        description="Padding token id: its embedding row starts at zero and gets no gradient from the lookup "
        "(transformers' padding_idx; Gemma's tokenizer: 0).",
    )

    @model_validator(mode="after")
    def _check(self):
        heads, kv = self.num_attention_heads, self.num_key_value_heads
        if heads % kv:
            fitting = [k for k in range(1, heads + 1) if heads % k == 0]
            raise ValueError(
                f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}; each key/value "
                "head serves a whole group of query heads: use num_key_value_heads in "
                f"{', '.join(map(str, fitting))}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} is odd; rotary embeddings turn pairs of features")
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types names {len(self.layer_types)} layers but num_hidden_layers is "
                f"{self.num_hidden_layers}: give one entry a layer, or null (from sliding_window_pattern)"
            )
        if self.pad_token_id is not None and self.pad_token_id >= self.vocab_size:
            raise ValueError(
                f"pad_token_id {self.pad_token_id} is not below vocab_size {self.vocab_size}: set "
                "pad_token_id to a token of the vocabulary, or null"
            )
        return self

    @property
    def kinds(self) -> tuple[LayerType, ...]:
        """Each layer's attention: ``layer_types``, or transformers' pattern (layer i is global
        where i + 1 is a multiple of ``sliding_window_pattern``)."""
        if self.layer_types is not None:
            return tuple(self.layer_types)
        pattern = self.sliding_window_pattern
        return tuple("full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                     for i in range(self.num_hidden_layers))  # fmt: skip

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window, None on a global layer or where it covers the whole context."""
        window = self.sliding_window
        if window is not None and window >= self.max_position_embeddings:
            window = None
        return tuple(window if kind == "sliding_attention" else None for kind in self.kinds)

    @property
    def key_value_heads(self) -> int:
        return self.num_key_value_heads

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim

    def inverse_frequencies(self) -> dict[LayerType, np.ndarray]:
        """The rotary frequencies of each kind of layer: the global layers' from ``rope_theta``
        (and ``rope_scaling``), the sliding layers' from ``rope_local_base_freq``."""
        scaling = self.rope_scaling.model_dump() if self.rope_scaling is not None else None
        return {
            "full_attention": rotary.inverse_frequencies(self.head_dim, self.rope_theta, scaling),
            "sliding_attention": rotary.inverse_frequencies(self.head_dim, self.rope_local_base_freq),
        }

    def sample_shape(self) -> tuple[int, ...]:
        return (min(EXAMPLE_LENGTH, self.max_position_embeddings),)

    def context_length(self) -> int:
        return self.max_position_embeddings

    def example_input(self, batch: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        return rng.integers(0, self.vocab_size, size=(batch, *self.sample_shape()), dtype=np.int64)

    def task_info(self):
        return {"vocab_size": self.vocab_size}


def sequence_length_message(context: int, steps: int | None = None) -> str:
    """Both twins refuse a sequence past the context in these words."""
    got = f"a sequence of {steps} tokens" if steps is not None else "a longer sequence"
    return (
        f"this Gemma reads at most max_position_embeddings {context} tokens (its context); got {got}: "
        "shorten the sequence (zoo sample keeps the last max_position_embeddings tokens)"
    )
