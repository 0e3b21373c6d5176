"""Named Elman RNN configs. Task, input size, classes and vocabulary are left to the data."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "rnn-tiny",
        "One tanh RNN layer of 16 units: for quick tests.",
        {"hidden_size": 16, "embedding_dim": 16},
    ),
    Preset(
        "rnn-small",
        "One tanh RNN layer of 256 units: digits as row sequences, or a small character model.",
        {"hidden_size": 256, "embedding_dim": 64},
    ),
)
