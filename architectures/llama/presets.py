"""Named Llama-class configs: the published shapes of SmolLM-135M / -360M (HuggingFaceTB's Llamas),
Qwen2-0.5B, Llama-3.2-1B, Qwen3-0.6B / -1.7B, Phi-3-mini, and the mixtures of experts Mixtral-8x7B and
Qwen3-30B-A3B (counted, not built in the tests), and micro ones for tests.

Each is the model's own ``config.json`` read field for field (its vocabulary included, so
``zoo list`` shows the published parameter counts; a recipe's data replaces it), and
``tests/test_llama.py`` checks each count against transformers' for the same config. The
family at its defaults is SmolLM-135M's shape too.
"""

from zoo.family import Preset

_SMOLLM = {
    "vocab_size": 49152,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 0,
    "eos_token_id": 0,
}

_QWEN3 = {
    "model_type": "qwen3",
    "qk_norm": True,
    "vocab_size": 151936,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}

PRESETS = (
    Preset(
        "mixtral-micro",
        "2 layers of 4 experts (2 chosen per token), width 64, 4 query heads sharing 2 key/value heads, "
        "256 tokens of context: the mixture of experts at test size (vocabulary from the data).",
        {
            "model_type": "mixtral",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": False,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        },
    ),
    Preset(
        "llama-micro",
        "2 layers, width 64, 4 query heads sharing 2 key/value heads, 256 tokens of context: quick runs "
        "and tests (vocabulary from the data).",
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "intermediate_size": 192,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "rope_theta": 10000.0,
            "tie_word_embeddings": True,
        },
    ),
    Preset(
        "smollm-135m",
        "HuggingFaceTB/SmolLM-135M: 30 layers, width 576, 9 query / 3 key-value heads, 2048 tokens, "
        "tied head.",
        {
            **_SMOLLM,
            "num_hidden_layers": 30,
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
        },
    ),
    Preset(
        "smollm-360m",
        "HuggingFaceTB/SmolLM-360M: 32 layers, width 960, 15 query / 5 key-value heads, 2048 tokens, "
        "tied head.",
        {
            **_SMOLLM,
            "num_hidden_layers": 32,
            "hidden_size": 960,
            "intermediate_size": 2560,
            "num_attention_heads": 15,
            "num_key_value_heads": 5,
        },
    ),
    Preset(
        "qwen2-0.5b",
        "Qwen/Qwen2-0.5B: 24 layers, width 896, 14 query / 2 key-value heads with query/key/value biases, "
        "rope_theta 1e6, 32768 tokens, tied head.",
        {
            "model_type": "qwen2",
            "vocab_size": 151936,
            "num_hidden_layers": 24,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "qkv_bias": True,
            "tie_word_embeddings": True,
            "bos_token_id": 151643,
            "eos_token_id": 151643,
        },
    ),
    Preset(
        "llama-3.2-1b",
        "meta-llama/Llama-3.2-1B: 16 layers, width 2048, 32 query / 8 key-value heads of 64, llama3 rope "
        "scaling (factor 32) over 131072 tokens, tied head.",
        {
            "vocab_size": 128256,
            "num_hidden_layers": 16,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "tie_word_embeddings": True,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
        },
    ),
    Preset(
        "qwen3-0.6b",
        "Qwen/Qwen3-0.6B: 28 layers, width 1024, 16 query / 8 key-value heads of 128 with query/key "
        "RMSNorms, rope_theta 1e6, 40960 tokens, tied head.",
        {**_QWEN3, "hidden_size": 1024, "intermediate_size": 3072},
    ),
    Preset(
        "qwen3-1.7b",
        "Qwen/Qwen3-1.7B: 28 layers, width 2048, 16 query / 8 key-value heads of 128 with query/key "
        "RMSNorms, rope_theta 1e6, 40960 tokens, tied head.",
        {**_QWEN3, "hidden_size": 2048, "intermediate_size": 6144},
    ),
)

PRESETS += (
    Preset(
        "phi-3-mini",
        "microsoft/Phi-3-mini-4k-instruct: 32 layers, width 3072, 32 heads (multi-head), a 2047-token "
        "window over 4096 tokens, untied head; fused qkv / gate_up projections in its files.",
        {
            "model_type": "phi3", "vocab_size": 32064, "num_hidden_layers": 32, "hidden_size": 3072,
            "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 32,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "sliding_window": 2047,
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000,
        },
    ),
)  # fmt: skip

# Counted, not built in make test (46.7 and 30.5 billion parameters): their counts are checked
# against transformers' on the meta device.
PRESETS += (
    Preset(
        "mixtral-8x7b",
        "mistralai/Mixtral-8x7B-v0.1: 32 layers of 8 experts (2 per token), width 4096, 32 query / 8 "
        "key-value heads, rope_theta 1e6, 32768 tokens, untied head.",
        {
            "model_type": "mixtral", "vocab_size": 32000, "num_hidden_layers": 32, "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
            "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
            "tie_word_embeddings": False, "num_local_experts": 8, "num_experts_per_tok": 2,
            "router_aux_loss_coef": 0.02, "bos_token_id": 1, "eos_token_id": 2,
        },
    ),
    Preset(
        "qwen3-30b-a3b",
        "Qwen/Qwen3-30B-A3B: 48 layers of 128 experts of width 768 (8 per token, renormalised), width "
        "2048, 32 query / 4 key-value heads of 128 with query/key norms, 40960 tokens, untied head.",
        {
            **_QWEN3, "model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
            "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 4,
            "tie_word_embeddings": False, "num_local_experts": 128, "num_experts_per_tok": 8,
            "moe_intermediate_size": 768, "norm_topk_prob": True,
        },
    ),
)  # fmt: skip

# transformers' hub names of these shapes (``zoo.load("HuggingFaceTB/SmolLM-135M")`` builds the
# shape with fresh weights; nothing is downloaded). The instruct models share their base's shape.
ALIASES = {
    "HuggingFaceTB/SmolLM-135M": "smollm-135m",
    "HuggingFaceTB/SmolLM-135M-Instruct": "smollm-135m",
    "HuggingFaceTB/SmolLM-360M": "smollm-360m",
    "HuggingFaceTB/SmolLM-360M-Instruct": "smollm-360m",
    "Qwen/Qwen2-0.5B": "qwen2-0.5b",
    "Qwen/Qwen2-0.5B-Instruct": "qwen2-0.5b",
    "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
    "Qwen/Qwen3-0.6B": "qwen3-0.6b",
    "Qwen/Qwen3-0.6B-Base": "qwen3-0.6b",
    "Qwen/Qwen3-1.7B": "qwen3-1.7b",
    "Qwen/Qwen3-1.7B-Base": "qwen3-1.7b",
    "microsoft/Phi-3-mini-4k-instruct": "phi-3-mini",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B-Base": "qwen3-30b-a3b",
}
