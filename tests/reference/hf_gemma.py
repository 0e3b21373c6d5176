"""transformers' Gemma 3 (text) and Gemma 2 as the gemma family's oracle (run in the reference environment).

``hf_gemma.py OUT`` writes what ``hf_llama.py`` writes for its cases (the same helpers, imported
from it), for these:

- ``counts.json``: parameters of ``*ForCausalLM`` built on the meta device from each published
  config in ``PUBLISHED`` (Gemma 3 270M and 1B, Gemma 2 2B), and ``published/NAME/config.json``;
- ``gemma3``: 3 layers (sliding, global, sliding; a window of 5 over 12 tokens), 4 : 2 heads of
  24 (not width / heads), ``query_pre_attn_scalar`` 20, global rope base 1e6 with linear
  scaling 4, local base 1000, a padding id, saved in shards; ``gemma2``: 2 layers (sliding,
  global), attention and logit soft-capping at 5 and 10 (low enough to bite on these weights).
  Both heads are untied: a tied one, at these random weights, only repeats the last token, and
  the generation test would test nothing (the tied head is drawn among the random configs and
  built by every preset). Each with its base model (``CASE-backbone/``), inputs, padding, logits,
  hidden states, greedy generation and each parameter's gradient of ``sum(logits * W)``.

``hf_gemma.py OUT random CONFIGS`` and ``hf_gemma.py OUT exported DIR INPUTS PADDING [PROMPTS]``
are ``hf_llama.py``'s.
"""

import json
import sys
from pathlib import Path

import hf_llama
import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch

SEED = 0
_GEMMA3 = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
    "attention_dropout": 0.0, "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": 1,
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "initializer_range": 0.02, "max_position_embeddings": 32768, "num_attention_heads": 4,
    "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000.0, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 512,
    "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 262144,
}  # fmt: skip
PUBLISHED = {
    "gemma-3-270m": {**_GEMMA3, "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
                     "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                     for i in range(18)]},
    "gemma-3-1b": {**_GEMMA3, "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
                   "eos_token_id": [1, 106]},
    "gemma-2-2b": {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2, "eos_token_id": 1,
        "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
        "intermediate_size": 9216, "max_position_embeddings": 8192, "num_attention_heads": 8,
        "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32",
        "use_cache": True, "vocab_size": 256000,
    },
}  # fmt: skip
TINY = {"hidden_size": 64, "intermediate_size": 96, "vocab_size": 101}
CASES = {
    "gemma3": (
        {"model_type": "gemma3_text", **TINY, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 24, "query_pre_attn_scalar": 20, "max_position_embeddings": 48,
         "sliding_window": 5, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
         "rope_theta": 1000000.0, "rope_local_base_freq": 1000.0,
         "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "tie_word_embeddings": False,
         "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1},
        (3, 12), 6,
    ),
    "gemma2": (
        {"model_type": "gemma2", **TINY, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 24, "max_position_embeddings": 32,
         "sliding_window": 5, "rope_theta": 1000.0, "attn_logit_softcapping": 5.0,
         "final_logit_softcapping": 10.0, "tie_word_embeddings": False, "pad_token_id": 0,
         "bos_token_id": 2, "eos_token_id": 1},
        (3, 12), 6,
    ),
}  # fmt: skip
SHARDED = {"gemma3"}


def fixtures(out: Path) -> None:
    counts = {name: hf_llama.count(fields) for name, fields in PUBLISHED.items()}
    (out / "counts.json").write_text(json.dumps(counts))
    for name, fields in PUBLISHED.items():
        (out / "published" / name).mkdir(parents=True, exist_ok=True)
        (out / "published" / name / "config.json").write_text(json.dumps(fields, indent=2))
    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    for case, (fields, (batch, steps), new_tokens) in CASES.items():
        model = hf_llama.build(fields, SEED, generator)
        model.save_pretrained(out / case, max_shard_size="20KB" if case in SHARDED else "5GB")
        model.model.save_pretrained(out / f"{case}-backbone")
        ids = hf_llama.outputs(model, out, case, batch, steps, rng)
        prompts, prompt_padding = ids[:2, : steps // 2 + 2].copy(), np.zeros((2, steps // 2 + 2), bool)
        prompt_padding[1, : steps // 3] = True
        prompts[prompt_padding] = 0
        np.save(out / f"{case}-prompts.npy", prompts)
        np.save(out / f"{case}-prompt-padding.npy", prompt_padding)
        np.save(out / f"{case}-generated.npy", hf_llama.greedy(model, prompts, prompt_padding, new_tokens))
        hf_llama.gradients(model, out, case, ids, rng)


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exported":
        hf_llama.exported(target, *sys.argv[3:])
    elif len(sys.argv) > 2 and sys.argv[2] == "random":
        hf_llama.random_cases(target, sys.argv[3])
    else:
        fixtures(target)
