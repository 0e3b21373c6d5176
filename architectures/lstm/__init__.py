"""LSTM family: LSTM or GRU recurrent nets for sequence classification and language modeling."""

from architectures.lstm.config import LSTMConfig
from architectures.lstm.presets import PRESETS
from architectures.lstm.weights import table
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="lstm",
    description="LSTM or GRU, stacked, optionally bidirectional; sequences or tokens.",
    config=LSTMConfig,
    inputs=InputSpec("sequence", padding_mask=True),
    tasks=("classification", "language_modeling"),
    weight_table=table,
    torch_model="architectures.lstm.torch_model:build",
    keras_model="architectures.lstm.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    presets=PRESETS,
)
