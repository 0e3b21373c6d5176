"""Llama family: transformers' ``LlamaForCausalLM`` (and ``LlamaModel``; Mistral's, Qwen2's and
Qwen3's, the same decoder, Qwen3's with per-head query/key RMSNorms; Mixtral's and Qwen3-MoE's
with mixtures of experts), exactly, in both frameworks."""

from architectures.llama.config import LlamaConfig
from architectures.llama.presets import ALIASES, PRESETS
from architectures.llama.weights import table
from zoo.checkpoint.foreign import ForeignFormat
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="llama",
    description="Llama-class decoder (transformers' LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
    "Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM; at its defaults SmolLM-135M's shape): "
    "RMSNorm, rotary positions, grouped-query attention, SwiGLU or a mixture of SwiGLU experts, query/key "
    "norms (Qwen3), tied or untied head, key/value cache; imports and exports transformers weights.",
    config=LlamaConfig,
    inputs=InputSpec("tokens", padding_mask=True),
    tasks=("language_modeling", "features"),
    weight_table=table,
    torch_model="architectures.llama.torch_model:build",
    keras_model="architectures.llama.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
    presets=PRESETS,
    aliases=ALIASES,
    formats=(
        ForeignFormat(
            "hf",
            "transformers' LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM / "
            "Phi3ForCausalLM / MixtralForCausalLM / Qwen3MoeForCausalLM (or their base *Model) state dict "
            "with its config.json",
            to_zoo="architectures.llama.formats:from_hf",
            from_zoo="architectures.llama.formats:to_hf",
        ),
    ),
)
