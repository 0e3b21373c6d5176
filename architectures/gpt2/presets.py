"""Named GPT-2 configs: OpenAI's gpt2-medium (transformers' shape) and a micro one for tests.

OpenAI's gpt2 (small: 12 blocks, width 768, 12 heads, 1024 positions) is the family itself at
its defaults, ``model.architecture: gpt2`` (a preset may not share its family's name). The
vocabulary comes from the data; the published 50257 is the default, so ``zoo list`` shows the
published parameter counts (the tied head counted once)."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "gpt2-micro",
        "2 blocks, width 64, 4 heads, 128 positions: quick runs and tests (vocabulary from the data).",
        {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128},
    ),
    Preset(
        "gpt2-medium",
        "OpenAI's GPT-2 medium (transformers' 'gpt2-medium'): 24 blocks, width 1024, 16 heads, "
        "1024 positions.",
        {"n_layer": 24, "n_embd": 1024, "n_head": 16, "n_positions": 1024},
    ),
)

# transformers' hub names (``gpt2`` and ``gpt2-medium`` are zoo's own names too).
ALIASES = {
    "openai-community/gpt2": "gpt2",
    "openai-community/gpt2-medium": "gpt2-medium",
}
