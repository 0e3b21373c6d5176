"""GPT-2 family: transformers' ``GPT2LMHeadModel`` (and ``GPT2Model``), exactly, in both frameworks."""

from architectures.gpt2.config import GPT2Config
from architectures.gpt2.presets import ALIASES, PRESETS
from architectures.gpt2.weights import table
from zoo.checkpoint.foreign import ForeignFormat
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="gpt2",
    description="GPT-2 (transformers' GPT2LMHeadModel; at its defaults OpenAI's gpt2): learned "
    "positions, pre-LN causal blocks, tanh-GELU, LM head tied to the token embedding, key/value "
    "cache; imports and exports transformers weights.",
    config=GPT2Config,
    inputs=InputSpec("tokens", padding_mask=True),
    tasks=("language_modeling", "features"),
    weight_table=table,
    torch_model="architectures.gpt2.torch_model:build",
    keras_model="architectures.gpt2.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    lora_targets=("attn.q", "attn.k", "attn.v", "attn.out_proj"),
    presets=PRESETS,
    aliases=ALIASES,
    formats=(
        ForeignFormat(
            "hf",
            "transformers' GPT2LMHeadModel / GPT2Model state dict (Conv1D weights [in, out], the tied "
            "lm_head once) with its config.json",
            to_zoo="architectures.gpt2.formats:from_hf",
            from_zoo="architectures.gpt2.formats:to_hf",
        ),
    ),
)
