"""Named LSTM/GRU configs. Task, input size, classes and vocabulary are left to the data."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "lstm-tiny",
        "One LSTM layer of 16 units: for quick tests.",
        {"hidden_size": 16, "embedding_dim": 16},
    ),
    Preset(
        "lstm-small",
        "One LSTM layer of 256 units: digits as row sequences, or a small character model.",
        {"hidden_size": 256, "embedding_dim": 64},
    ),
    Preset(
        "gru-small",
        "One GRU layer of 256 units (torch's GRU; Keras GRU with reset_after=True).",
        {"cell": "gru", "hidden_size": 256, "embedding_dim": 64},
    ),
)
