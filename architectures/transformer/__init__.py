"""Transformer family: a bidirectional encoder classifier and a decoder-only causal language model."""

from architectures.transformer.config import TransformerConfig
from architectures.transformer.presets import PRESETS
from architectures.transformer.weights import table
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="transformer",
    description="Transformer blocks (pre- or post-norm): encoder classifier over feature sequences, "
    "or causal character/token language model.",
    config=TransformerConfig,
    inputs=InputSpec("sequence", padding_mask=True),
    tasks=("classification", "language_modeling"),
    weight_table=table,
    torch_model="architectures.transformer.torch_model:build",
    keras_model="architectures.transformer.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    presets=PRESETS,
)
