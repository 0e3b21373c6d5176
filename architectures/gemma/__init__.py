"""Gemma family: transformers' ``Gemma3ForCausalLM`` (text) and ``Gemma2ForCausalLM`` (and their base
models), exactly, in both frameworks."""

from architectures.gemma.config import GemmaConfig
from architectures.gemma.presets import ALIASES, PRESETS
from architectures.gemma.weights import table
from zoo.checkpoint.foreign import ForeignFormat
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="gemma",
    description="Gemma 3 / Gemma 2 decoder (transformers' Gemma3ForCausalLM, Gemma2ForCausalLM; at its "
    "defaults Gemma 3 270M's shape): scaled embedding, (1 + w) RMSNorms before and after attention and "
    "MLP, GeGLU, grouped-query attention with query/key norms (Gemma 3) or soft-capping (Gemma 2), "
    "sliding-window and global layers with their own rotary bases, tied head, key/value cache; imports "
    "and exports transformers weights.",
    config=GemmaConfig,
    inputs=InputSpec("tokens", padding_mask=True),
    tasks=("language_modeling", "features"),
    weight_table=table,
    torch_model="architectures.gemma.torch_model:build",
    keras_model="architectures.gemma.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
    presets=PRESETS,
    aliases=ALIASES,
    formats=(
        ForeignFormat(
            "hf",
            "transformers' Gemma3ForCausalLM / Gemma2ForCausalLM (or Gemma3TextModel / Gemma2Model) state "
            "dict with its config.json",
            to_zoo="architectures.gemma.formats:from_hf",
            from_zoo="architectures.gemma.formats:to_hf",
        ),
    ),
)
