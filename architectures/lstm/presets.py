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
        "lstm-medium-lm",
        "Zaremba et al.'s medium word LSTM language model: 2 layers of 650 units, 650-wide "
        "embeddings tied to the head, dropout 0.5 (19.8M parameters untied at a 10,000-word "
        "vocabulary, 13.3M tied).",
        {
            "task": "language_modeling",
            "num_layers": 2,
            "hidden_size": 650,
            "embedding_dim": 650,
            "dropout": 0.5,
            "tie_embeddings": True,
        },
    ),
    Preset(
        "bilstm-classifier",
        "A 2-layer bidirectional LSTM of 256 units per direction over token ids or features, "
        "mean-pooled over the real (unpadded) steps.",
        {"num_layers": 2, "hidden_size": 256, "embedding_dim": 128, "bidirectional": True, "pooling": "mean"},
    ),
    Preset(
        "bigru-classifier",
        "A 2-layer bidirectional GRU of 256 units per direction; each direction's final state "
        "at each sequence's own end.",
        {"cell": "gru", "num_layers": 2, "hidden_size": 256, "embedding_dim": 128, "bidirectional": True},
    ),
    Preset(
        "gru-small",
        "One GRU layer of 256 units (torch's GRU; Keras GRU with reset_after=True).",
        {"cell": "gru", "hidden_size": 256, "embedding_dim": 64},
    ),
)
