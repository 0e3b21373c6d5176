"""RNN family: Elman recurrent nets (tanh or ReLU) for sequence classification and language modeling."""

from architectures.rnn.config import RNNConfig
from architectures.rnn.presets import PRESETS
from architectures.rnn.weights import table
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="rnn",
    description="Elman RNN (tanh or ReLU), stacked, optionally bidirectional; sequences or tokens.",
    config=RNNConfig,
    inputs=InputSpec("sequence", padding_mask=True),
    tasks=("classification", "language_modeling"),
    weight_table=table,
    torch_model="architectures.rnn.torch_model:build",
    keras_model="architectures.rnn.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    presets=PRESETS,
)
