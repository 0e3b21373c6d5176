"""PEFT adapters over a matrix of options, made by PEFT itself (run in the reference environment).

``peft_matrix.py OUT make`` builds tiny random transformers models (GPT-2, Llama untied, Gemma 3,
BERT masked LM; seeded), saves each with ``save_pretrained`` to ``OUT/base-FAMILY/`` and, for each
case of ``CASES`` (targets including embeddings and all-linear, ``modules_to_save``,
``lora_bias``, rsLoRA, rank and alpha patterns), makes the adapter with ``get_peft_model``,
draws every adapter tensor and every saved module copy away from its init (else a dropped
tensor changes nothing), saves it to ``OUT/CASE/adapter/`` and writes, on the token ids
``OUT/ids.npy``, the adapted model's logits ``OUT/CASE/logits.npy`` and those after
``merge_and_unload`` ``OUT/CASE/merged.npy``.

``peft_matrix.py OUT load MADE EXPORTED`` loads, for each case folder of EXPORTED (what
``zoo export --format peft`` wrote), the adapter onto MADE's base with
``PeftModel.from_pretrained`` and writes its logits on MADE's ids to ``OUT/CASE.npy``.
"""

import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model

VOCAB = 101
BASES = {
    "gpt2": (
        "GPT2LMHeadModel",
        transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2, n_inner=64,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        ),
    ),
    "llama": (
        "LlamaForCausalLM",
        transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            tie_word_embeddings=False, rms_norm_eps=1e-6,
        ),
    ),
    "gemma": (
        "Gemma3ForCausalLM",
        transformers.Gemma3TextConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
            sliding_window=4, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=8,
            pad_token_id=None, bos_token_id=None, eos_token_id=None,
        ),
    ),
    "bert": (
        "BertForMaskedLM",
        transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        ),
    ),
}  # fmt: skip
CASES = {
    "gpt2-attn-mlp": ("gpt2", {"target_modules": ["c_attn", "c_proj", "c_fc"], "fan_in_fan_out": True}),
    "gpt2-embedding": (
        "gpt2", {"target_modules": ["wte", "c_attn"], "fan_in_fan_out": True, "modules_to_save": ["ln_f"]},
    ),
    "gpt2-bias-rslora": (
        "gpt2",
        {"target_modules": ["c_attn", "c_proj"], "fan_in_fan_out": True, "lora_bias": True,
         "use_rslora": True, "rank_pattern": {"c_proj": 2}, "alpha_pattern": {"c_proj": 3}},
    ),
    "gpt2-all-linear": ("gpt2", {"target_modules": "all-linear", "modules_to_save": ["ln_f"]}),
    "llama-patterns-head": (
        "llama",
        {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"], "lora_alpha": 16,
         "rank_pattern": {"v_proj": 2}, "alpha_pattern": {"o_proj": 4}, "modules_to_save": ["lm_head"]},
    ),
    "llama-embedding-rslora": (
        "llama", {"target_modules": ["embed_tokens", "q_proj", "down_proj"], "use_rslora": True},
    ),
    "llama-all-linear": ("llama", {"target_modules": "all-linear", "r": 2, "lora_alpha": 5}),
    "gemma-attn-mlp": (
        "gemma", {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj"]},
    ),
    "bert-qv-bias": (
        "bert",
        {"target_modules": ["query", "value"], "lora_bias": True,
         "modules_to_save": ["cls.predictions.transform.dense"]},
    ),
    "bert-embedding": ("bert", {"target_modules": ["word_embeddings", "query", "key", "dense"]}),
    "bert-all-linear": (
        "bert", {"target_modules": "all-linear", "use_rslora": True, "r": 8, "lora_alpha": 4},
    ),
}  # fmt: skip


def logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids)).logits.float().numpy()


def base(out: Path, family: str):
    name, config = BASES[family]
    folder = out / f"base-{family}"
    if not folder.is_dir():
        torch.manual_seed(1)
        model = getattr(transformers, name)(config).eval()
        with torch.no_grad():  # norms and biases away from their trivial init: a mapping error shows
            for parameter in model.parameters():
                if parameter.ndim == 1:
                    parameter.add_(torch.randn_like(parameter) * 0.1)
        model.save_pretrained(folder)
    return getattr(transformers, name).from_pretrained(folder).eval()


def make(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ids = np.random.default_rng(0).integers(0, VOCAB, (2, 12)).astype(np.int64)
    np.save(out / "ids.npy", ids)
    for case, (family, options) in CASES.items():
        model = base(out, family)
        torch.manual_seed(0)
        settings = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, **options}
        model = get_peft_model(model, LoraConfig(**settings))
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "lora_" in name or "modules_to_save" in name:
                    parameter.add_(torch.randn_like(parameter) * 0.1)
        model.eval()
        folder = out / case
        model.save_pretrained(folder / "adapter")
        np.save(folder / "logits.npy", logits(model, ids))
        np.save(folder / "merged.npy", logits(model.merge_and_unload(), ids))
    (out / "cases.json").write_text(json.dumps({c: f for c, (f, _) in CASES.items()}))


def load(out: Path, made: Path, exported: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ids = np.load(made / "ids.npy")
    for folder in sorted(p for p in exported.iterdir() if p.is_dir()):
        family = CASES[folder.name][0]
        model = PeftModel.from_pretrained(base(made, family), folder).eval()
        np.save(out / f"{folder.name}.npy", logits(model, ids))


if __name__ == "__main__":
    if sys.argv[2] == "make":
        make(Path(sys.argv[1]))
    else:
        load(Path(sys.argv[1]), Path(sys.argv[3]), Path(sys.argv[4]))
