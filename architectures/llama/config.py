"""Hyperparameters of the llama family: transformers' ``LlamaConfig`` (and Mistral's, Qwen2's,
Qwen3's and Phi-3's, which describe the same decoder), under transformers' field names.

The fields read across from a ``config.json`` one to one (``architectures.llama.config_json``),
except the attention biases: Llama's ``attention_bias`` puts a bias on all four projections and
Qwen2's attention always has one on the query, key and value projections and none on the
output, so zoo says which with two fields, ``qkv_bias`` and ``output_bias``. Qwen3 is the same
decoder with ``qk_norm`` (an RMSNorm on each head's query and key) and, usually, a ``head_dim``
of its own (wider than hidden_size / num_attention_heads). Mixtral and Qwen3-MoE are the same
decoder with ``num_local_experts``: a mixture of gated-MLP experts on the layers ``moe_layers``
names (``zoo.nn.torch.moe``). ``model_type`` remembers which transformers class the weights come
from (and are exported as); it changes nothing the twins compute.

What zoo's twins do not compute is refused here by name, so that nothing in a recipe or an
imported config is ignored: a rope scaling other than ``llama3`` (pydantic refuses another
``rope_type``), a head width that rotary embeddings cannot turn (odd). A ``sliding_window``
shorter than the context is computed: Mistral's causal window, on every layer, or on the layers
``layer_types`` marks ``sliding_attention`` (Qwen2's and Qwen3's ``max_window_layers``), each
layer's window in ``layer_windows``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from zoo.family import ArchitectureConfig
from zoo.nn import rotary

EXAMPLE_LENGTH = 8  # token ids in an example batch: short, so the large-vocabulary presets stay cheap
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
MOE_TYPES = ("mixtral", "qwen3_moe")


class Llama3RopeScaling(BaseModel):
    """transformers' ``rope_scaling`` of type ``llama3`` (Llama 3.1 / 3.2): the rotary frequencies
    of long wavelengths divided by ``factor``, short ones kept, a smooth blend between
    (``zoo.nn.rotary``)."""

    model_config = ConfigDict(extra="forbid")

    rope_type: Literal["llama3"] = Field(
        "llama3", description="The only scaling zoo computes; other types are refused by name."
    )
    factor: float = Field(8.0, ge=1, le=1024, description="Divisor of the long-wavelength frequencies.")
    low_freq_factor: float = Field(
        1.0,
        gt=0,
        le=1024,
        description="Wavelengths over original_max_position_embeddings / this are divided.",
    )
    high_freq_factor: float = Field(
        4.0, gt=0, le=1024, description="Wavelengths under original_max_position_embeddings / this are kept."
    )
    original_max_position_embeddings: int = Field(
        8192, ge=1, le=10_000_000, description="The context the model was pre-trained at."
    )

    @model_validator(mode="after")
    def _check(self):
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                f"rope_scaling.high_freq_factor {self.high_freq_factor} must be greater than "
                f"rope_scaling.low_freq_factor {self.low_freq_factor} (the blend divides by their difference)"
            )
        return self


class LongRopeScaling(BaseModel):
    """transformers' ``rope_scaling`` of type ``longrope`` (Phi-3's 128k models): per-frequency
    divisors, ``short_factor`` for a forward within ``original_max_position_embeddings`` and
    ``long_factor`` past it, and the tables scaled by ``attention_factor`` (``zoo.nn.rotary.LongRope``)."""

    model_config = ConfigDict(extra="forbid")

    rope_type: Literal["longrope"] = Field("longrope", description="Phi-3's long-context rotary scaling.")
    short_factor: list[float] = Field(max_length=1024, description="One divisor per rotary frequency.")
    long_factor: list[float] = Field(
        max_length=1024, description="One divisor per frequency, past the original."
    )
    original_max_position_embeddings: int = Field(
        4096, ge=1, le=10_000_000, description="The context the model was pre-trained at."
    )
    factor: float | None = Field(
        None, gt=0, le=1e6, description="null: max_position_embeddings / original_max_position_embeddings."
    )
    attention_factor: float | None = Field(
        None, gt=0, le=100, description="The tables' scale; null: sqrt(1 + log(factor) / log(original))."
    )


def _rope_type(value) -> str:
    """A ``rope_scaling``'s type: its ``rope_type``, llama3 where a mapping leaves it out."""
    return value.get("rope_type", "llama3") if isinstance(value, dict) else value.rope_type


RopeScaling = Annotated[
    Annotated[Llama3RopeScaling, Tag("llama3")] | Annotated[LongRopeScaling, Tag("longrope")],
    Discriminator(_rope_type),
]


class LlamaConfig(ArchitectureConfig):
    """Token embedding, ``num_hidden_layers`` pre-norm decoder layers (RMSNorm -> grouped-query
    causal self-attention with rotary positions -> add; RMSNorm -> SwiGLU MLP -> add), a final
    RMSNorm and a language-model head, tied to the token embedding or a matrix of its own:
    transformers' ``LlamaForCausalLM`` (``MistralForCausalLM``, ``Qwen2ForCausalLM``, with ``qk_norm``
    ``Qwen3ForCausalLM``, and with ``num_local_experts`` a mixture of SwiGLU experts in place of the
    MLP: ``MixtralForCausalLM``, ``Qwen3MoeForCausalLM``).

    ``task`` "features" is the base model (``LlamaModel``): the final RMSNorm's hidden states
    (N, T, hidden_size) instead of logits. The defaults are SmolLM-135M's shape (HuggingFaceTB's
    Llama), with the vocabulary from the data.
    """

    DATA_FIELDS = ("task", "vocab_size")

    architecture: Literal["llama"] = "llama"
    task: Literal["language_modeling", "features"] = Field(
        "language_modeling",
        description="Next-token logits (LlamaForCausalLM), or the last hidden state (LlamaModel).",
    )
    model_type: Literal["llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen3_moe"] = Field(
        "llama",
        description="The transformers class family of these weights (config.json's model_type), used by "
        "zoo export --format hf; the computation is the same.",
    )
    vocab_size: int = Field(49152, ge=2, le=1_000_000, description="Token vocabulary (from the data).")
    hidden_size: int = Field(576, ge=1, le=65536, description="Width of the residual stream.")
    intermediate_size: int = Field(1536, ge=1, le=262144, description="Hidden width of each SwiGLU MLP.")
    num_hidden_layers: int = Field(30, ge=1, le=256, description="Decoder layers.")
    num_attention_heads: int = Field(
        9, ge=1, le=256, description="Query heads; must divide hidden_size unless head_dim is given."
    )
    num_key_value_heads: int | None = Field(
        3,
        ge=1,
        le=256,
        description="Key/value heads, each shared by num_attention_heads / this query heads (grouped-query "
        "attention; 1 is multi-query); None is num_attention_heads.",
    )
    head_dim: int | None = Field(
        None,
        ge=2,
        le=1024,
        description="Features per head (even); None is hidden_size / num_attention_heads.",
    )
    hidden_act: Literal["silu", "swish"] = Field(
        "silu", description="The MLP's gate activation (transformers' two names for x * sigmoid(x))."
    )
    max_position_embeddings: int = Field(
        2048, ge=1, le=10_000_000, description="Longest sequence the model reads (its context)."
    )
    rms_norm_eps: float = Field(1e-5, gt=0, le=0.1, description="RMSNorm epsilon.")
    rope_theta: float = Field(10000.0, gt=0, le=1e12, description="Base wavelength of the rotary embeddings.")
    rope_scaling: RopeScaling | None = Field(
        None,
        description="Rotary frequency scaling: null, transformers' llama3 type (Llama 3.1 / 3.2), or "
        "longrope (Phi-3's 128k models).",
    )
    qkv_bias: bool = Field(
        False, description="Biases on the query, key and value projections (Llama's attention_bias; Qwen2)."
    )
    output_bias: bool = Field(
        False, description="A bias on the attention's output projection (Llama's attention_bias)."
    )
    mlp_bias: bool = Field(False, description="Biases on the MLP's three projections (Llama's mlp_bias).")
    qk_norm: bool = Field(
        False,
        description="An RMSNorm (of head_dim features, rms_norm_eps) on each head's query and key before "
        "the rotation (Qwen3's q_norm and k_norm).",
    )
    tie_word_embeddings: bool = Field(
        True, description="The LM head is the token embedding (one matrix); false: a head matrix of its own."
    )
    sliding_window: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Mistral's (and Qwen2's / Qwen3's) sliding attention window: each token attends to "
        "itself and the sliding_window - 1 before it; null for none (one as long as the context changes "
        "nothing). On every layer, or on those layer_types marks sliding_attention.",
    )
    layer_types: list[Literal["full_attention", "sliding_attention"]] | None = Field(
        None,
        max_length=1024,
        description="Which layers the sliding window applies to, one entry a layer (transformers' "
        "layer_types: Qwen2's and Qwen3's layers from max_window_layers on); null: every layer.",
    )
    num_local_experts: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Mixture-of-experts (Mixtral, Qwen3-MoE): this many gated-MLP experts per MoE layer, "
        "a router choosing num_experts_per_tok of them per token; null: one dense MLP a layer.",
    )
    num_experts_per_tok: int = Field(2, ge=1, le=1024, description="Experts each token goes through.")
    moe_intermediate_size: int | None = Field(
        None,
        ge=1,
        le=262144,
        description="Each expert's hidden width (Qwen3-MoE's); null: intermediate_size.",
    )
    norm_topk_prob: bool = Field(
        True,
        description="Renormalise the chosen experts' probabilities to sum to one (Mixtral: always; "
        "Qwen3-MoE: its norm_topk_prob).",
    )
    decoder_sparse_step: int = Field(
        1,
        ge=1,
        le=1024,
        description="Layer i is an MoE layer where i + 1 is a multiple of this (Qwen3-MoE's).",
    )
    mlp_only_layers: list[Annotated[int, Field(ge=0, le=1023)]] = Field(
        [], max_length=1024, description="Layers that keep a dense MLP (Qwen3-MoE's mlp_only_layers)."
    )
    output_router_logits: bool = Field(
        False,
        description="Train with the load-balancing loss, router_aux_loss_coef times Switch Transformer's "
        "(transformers' output_router_logits).",
    )
    router_aux_loss_coef: float = Field(
        0.001, ge=0, le=100, description="The load-balancing loss's weight in the training loss."
    )
    attention_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the attention probabilities.")
    initializer_range: float = Field(
        0.02, gt=0, le=1, description="Standard deviation of the normal initial weights."
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
        "(transformers' padding_idx).",
    )

    @model_validator(mode="after")
    def _check(self):
        heads, kv = self.num_attention_heads, self.key_value_heads
        if self.head_dim is None and self.hidden_size % heads:
            fitting = [h for h in range(1, min(self.hidden_size, 256) + 1) if self.hidden_size % h == 0][-6:]
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {heads} "
                f"(transformers requires it): use num_attention_heads in {', '.join(map(str, fitting))}"
            )
        if heads % kv:
            fitting = [k for k in range(1, heads + 1) if heads % k == 0]
            raise ValueError(
                f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}; each key/value "
                "head serves a whole group of query heads: use num_key_value_heads in "
                f"{', '.join(map(str, fitting))}"
            )
        if self.attention_head_dim % 2:
            raise ValueError(
                f"the head width is {self.attention_head_dim} ({self._head_dim_words()}); rotary embeddings "
                "turn pairs of features: give an even head_dim"
            )
        if isinstance(self.rope_scaling, LongRopeScaling):
            half = self.attention_head_dim // 2
            wrong = [
                f"rope_scaling.{name} has {len(factors)} factors"
                for name, factors in (("short_factor", self.rope_scaling.short_factor),
                                      ("long_factor", self.rope_scaling.long_factor))
                if len(factors) != half
            ]  # fmt: skip
            if wrong:
                raise ValueError(f"{'; '.join(wrong)}: a longrope scaling has one a rotary frequency, {half}")
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types names {len(self.layer_types)} layers but num_hidden_layers is "
                f"{self.num_hidden_layers}: give one entry a layer, or null (the window on every layer)"
            )
        if self.num_local_experts is not None and self.num_experts_per_tok > self.num_local_experts:
            raise ValueError(
                f"num_experts_per_tok {self.num_experts_per_tok} is more than num_local_experts "
                f"{self.num_local_experts}: a token goes through at most every expert"
            )
        outside = [i for i in self.mlp_only_layers if not 0 <= i < self.num_hidden_layers]
        if outside:
            raise ValueError(
                f"mlp_only_layers {outside} are not layers of this model (0 to {self.num_hidden_layers - 1})"
            )
        if self.pad_token_id is not None and self.pad_token_id >= self.vocab_size:
            raise ValueError(
                f"pad_token_id {self.pad_token_id} is not below vocab_size {self.vocab_size}: set "
                "pad_token_id to a token of the vocabulary, or null"
            )
        return self

    @property
    def attention_window(self) -> int | None:
        """The sliding window the twins' masks apply: None where it covers the whole context."""
        window = self.sliding_window
        return window if window is not None and window < self.max_position_embeddings else None

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's window (:attr:`attention_window`, or None on a ``full_attention`` layer)."""
        kinds = self.layer_types or ["sliding_attention"] * self.num_hidden_layers
        return tuple(self.attention_window if kind == "sliding_attention" else None for kind in kinds)

    @property
    def moe_layers(self) -> tuple[bool, ...]:
        """Which layers are mixture-of-experts layers, as transformers' Qwen3-MoE decides (Mixtral:
        every layer)."""
        if self.num_local_experts is None:
            return (False,) * self.num_hidden_layers
        step, dense = self.decoder_sparse_step, set(self.mlp_only_layers)
        return tuple(i not in dense and (i + 1) % step == 0 for i in range(self.num_hidden_layers))

    @property
    def expert_size(self) -> int:
        """Each expert's hidden width."""
        return self.moe_intermediate_size or self.intermediate_size

    def _head_dim_words(self) -> str:
        if self.head_dim is not None:
            return "head_dim"
        return f"hidden_size {self.hidden_size} / num_attention_heads {self.num_attention_heads}"

    @property
    def key_value_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def attention_head_dim(self) -> int:
        """Features per head: ``head_dim``, or transformers' ``hidden_size // num_attention_heads``."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def inverse_frequencies(self) -> np.ndarray | rotary.LongRope:
        """The rotary frequencies both twins turn by (``zoo.nn.rotary``)."""
        scaling = self.rope_scaling
        if isinstance(scaling, LongRopeScaling):
            return rotary.longrope(
                self.attention_head_dim, self.rope_theta, scaling.short_factor, scaling.long_factor,
                scaling.original_max_position_embeddings, self.max_position_embeddings, scaling.factor,
                scaling.attention_factor,
            )  # fmt: skip
        return rotary.inverse_frequencies(
            self.attention_head_dim, self.rope_theta, scaling.model_dump() if scaling is not None else None
        )

    def sample_shape(self) -> tuple[int, ...]:
        return (min(EXAMPLE_LENGTH, self.max_position_embeddings),)

    def context_length(self) -> int:
        return self.max_position_embeddings

    def example_input(self, batch: int, seed: int = 0):
        """Token ids below ``vocab_size`` for both tasks (the features task reads ids too)."""
        rng = np.random.default_rng(seed)
        return rng.integers(0, self.vocab_size, size=(batch, *self.sample_shape()), dtype=np.int64)

    def task_info(self):
        return {"vocab_size": self.vocab_size}


def sequence_length_message(context: int, steps: int | None = None) -> str:
    """Both twins refuse a sequence past the context in these words (``steps`` is left out where
    only a graph knows it)."""
    got = f"a sequence of {steps} tokens" if steps is not None else "a longer sequence"
    return (
        f"this Llama reads at most max_position_embeddings {context} tokens (its context); got {got}: "
        "shorten the sequence (zoo sample keeps the last max_position_embeddings tokens)"
    )
