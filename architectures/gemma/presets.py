"""Named Gemma configs: the published shapes of Gemma 3 270M and 1B and Gemma 2 2B, and a micro
one for tests.

Each is the model's own ``config.json`` read field for field (its vocabulary included, so
``zoo list`` shows the published parameter counts; a recipe's data replaces it), and
``tests/test_gemma.py`` checks each count against transformers' for the same config. The family
at its defaults is Gemma 3 270M's shape.
"""

from zoo.family import Preset

_GEMMA3 = {
    "model_type": "gemma3_text",
    "vocab_size": 262144,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10000.0,
    "query_pre_attn_scalar": 256,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "qk_norm": True,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}

PRESETS = (
    Preset(
        "gemma-micro",
        "2 layers (one sliding, window 8; one global), width 64, 4 query heads of 16 sharing 2 key/value "
        "heads, 256 tokens of context, Gemma 3's norms and two rotary bases: quick runs and tests "
        "(vocabulary from the data).",
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "intermediate_size": 192,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "max_position_embeddings": 256,
            "sliding_window": 8,
            "sliding_window_pattern": 2,
            "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10000.0,
        },
    ),
    Preset(
        "gemma-3-270m",
        "google/gemma-3-270m: 18 layers (every sixth global, the others a 512-token window), width 640, "
        "4 query / 1 key-value heads of 256, 32768 tokens, tied head.",
        {**_GEMMA3, "num_hidden_layers": 18, "hidden_size": 640, "intermediate_size": 2048},
    ),
    Preset(
        "gemma-3-1b",
        "google/gemma-3-1b-pt: 26 layers (every sixth global, the others a 512-token window), width 1152, "
        "4 query / 1 key-value heads of 256, 32768 tokens, tied head.",
        {
            **_GEMMA3,
            "num_hidden_layers": 26,
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "eos_token_id": [1, 106],
        },
    ),
    Preset(
        "gemma-2-2b",
        "google/gemma-2-2b: 26 layers alternating a 4096-token window and global attention, width 2304, "
        "8 query / 4 key-value heads of 256, attention and logit soft-capping (50, 30), 8192 tokens, "
        "tied head.",
        {
            "model_type": "gemma2",
            "vocab_size": 256000,
            "num_hidden_layers": 26,
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "max_position_embeddings": 8192,
            "rope_theta": 10000.0,
            "rope_local_base_freq": 10000.0,
            "query_pre_attn_scalar": 256,
            "sliding_window": 4096,
            "sliding_window_pattern": 2,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "qk_norm": False,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "pad_token_id": 0,
        },
    ),
)

# transformers' hub names of these shapes (``zoo.load("google/gemma-3-270m")`` builds the shape
# with fresh weights; nothing is downloaded). The instruction-tuned models share their base's shape.
ALIASES = {
    "google/gemma-3-270m": "gemma-3-270m",
    "google/gemma-3-270m-it": "gemma-3-270m",
    "google/gemma-3-1b-pt": "gemma-3-1b",
    "google/gemma-3-1b-it": "gemma-3-1b",
    "google/gemma-2-2b": "gemma-2-2b",
    "google/gemma-2-2b-it": "gemma-2-2b",
}
