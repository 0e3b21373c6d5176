"""Named transformer configs. The task, input size, classes and vocabulary come from the data."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "transformer-tiny",
        "Two pre-norm blocks, d_model 32, 2 heads: for quick tests.",
        {"d_model": 32, "num_heads": 2, "num_layers": 2, "ff_dim": 64, "max_len": 64, "dropout": 0.0},
    ),
    Preset(
        "transformer-small",
        "Two pre-norm blocks, d_model 128, 4 heads, GELU, learned positions up to 256: a "
        "character LM or a digits classifier in minutes on a CPU. Dropout is off: runs that short "
        "underfit, and dropout nearly doubles a CPU step; set model.dropout for longer runs.",
        {"d_model": 128, "num_heads": 4, "num_layers": 2, "ff_dim": 512, "max_len": 256, "dropout": 0.0},
    ),
    Preset(
        "transformer-classic-tiny",
        "The original recipe, tiny: post-norm blocks, ReLU, sinusoidal positions, first-step "
        "pooling; d_model 32, 4 heads.",
        {
            "d_model": 32,
            "num_heads": 4,
            "num_layers": 2,
            "ff_dim": 64,
            "max_len": 64,
            "dropout": 0.0,
            "norm_first": False,
            "activation": "relu",
            "positions": "sinusoidal",
            "pooling": "first",
        },
    ),
)
