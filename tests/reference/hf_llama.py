"""transformers' Llama, Mistral, Qwen2, Qwen3 and Phi-3 as the llama family's oracle (run in the reference
environment).

``hf_llama.py OUT`` writes, for the tests in zoo's environment (Mixtral-8x7B, Qwen3-30B-A3B and the
``mixtral`` and ``qwen3_moe`` cases are the mixtures of experts):

- ``counts.json``: parameters of ``*ForCausalLM`` built on the meta device from each published
  config in ``PUBLISHED`` (SmolLM-135M / -360M, Qwen2-0.5B, Llama-3.2-1B, Qwen3-0.6B / -1.7B;
  ``parameters()`` yields a tied head once), and ``published/NAME/config.json``, that config as
  the model's repository has it;
- for each case of ``CASES`` (Llama with grouped-query attention and a padding id and a
  tokenizer; Llama untied, multi-query, with every bias, an explicit head_dim and llama3 rope
  scaling; Mistral with a sliding window of 5 tokens (shorter than its inputs); Qwen2 with its
  query/key/value biases, untied, saved in shards; Qwen3 with its query/key norms and a head_dim
  of its own, in shards too; Phi-3 with its fused projections and a window of 6): the
  ``*ForCausalLM`` seeded, every RMSNorm weight and bias randomised and the embeddings widened
  (greedy decoding then has no near-ties), written by
  ``save_pretrained`` to ``CASE/`` and its base model to ``CASE-backbone/``; ``CASE-inputs.npy``,
  ``CASE-padding.npy`` (True at padding: a left- and a right-padded row) and, in eval mode with
  that attention mask and the position ids ``generate`` derives from it, ``CASE-logits.npy`` and
  ``CASE-hidden.npy``; ``CASE-generated.npy``: greedy ``generate`` from ``CASE-prompts.npy``
  (left-padded, ``CASE-prompt-padding.npy``), the new tokens only; ``CASE-config.json``: the
  config as transformers holds it (``to_dict()``). For the cases of ``GRADIENTS``, ``CASE-weights.npy``
  (W, random, zero at padding) and ``CASE-gradients.npz``: each parameter's gradient of
  ``sum(logits * W)`` in eval mode, under the backbone's names (no ``model.`` prefix), the
  experts one by one (:func:`per_expert`); for the mixtures of experts, ``CASE-aux.npy``: their
  load-balancing loss (``aux_loss``) on those inputs.

``hf_llama.py OUT random CONFIGS`` does the same (no generation, no backbone) for each entry of
the JSON list CONFIGS ({"name", "config", "seed", "batch", "steps"}), into ``NAME/`` and
``NAME-*.npy``: the random configs the tests draw with Hypothesis.

``hf_llama.py OUT exported DIR INPUTS PADDING [PROMPTS]`` loads what zoo exported to DIR with
``AutoModelForCausalLM`` (or ``AutoModel`` for a base model) ``from_pretrained`` and writes its
eval output (``logits.npy``), in ``loaded.json`` the keys transformers reported missing,
unexpected or mismatched, the class and whether the head is tied, ``config.json`` (its
``to_dict()``), and with PROMPTS (a JSON list of token id lists) ``generated.json``: greedy
``generate`` of 8 new tokens after each.
"""

import copy
import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

SEED = 0
PUBLISHED = {
    "smollm-135m": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu",
        "hidden_size": 576, "initializer_range": 0.02, "intermediate_size": 1536,
        "max_position_embeddings": 2048, "num_attention_heads": 9, "num_hidden_layers": 30,
        "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": 49152,
    },
    "smollm-360m": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu",
        "hidden_size": 960, "initializer_range": 0.02, "intermediate_size": 2560,
        "max_position_embeddings": 2048, "num_attention_heads": 15, "num_hidden_layers": 32,
        "num_key_value_heads": 5, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": 49152,
    },
    "qwen2-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
        "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
        "max_window_layers": 24, "num_attention_heads": 14, "num_hidden_layers": 24,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936,
    },
    "llama-3.2-1b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "mlp_bias": False, "num_attention_heads": 32,
        "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3",
        },
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
        "vocab_size": 128256,
    },
    **{
        name: {
            "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": intermediate,
            "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
            "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
            "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 151936,
        }
        for name, hidden, intermediate in (("qwen3-0.6b", 1024, 3072), ("qwen3-1.7b", 2048, 6144))
    },
    "phi-3-mini": {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_dropout": 0.0,
        "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
        "hidden_size": 3072,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32064,
    },
    "mixtral-8x7b": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
        "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
        "rms_norm_eps": 1e-05, "rope_theta": 1e6,
        "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32000,
    },
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
        "mlp_only_layers": [], "moe_intermediate_size": 768, "norm_topk_prob": True,
        "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
        "num_key_value_heads": 4,
        "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
    },
}  # fmt: skip
TINY = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 101}
CASES = {
    "llama": (
        {"model_type": "llama", **TINY, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
         "tie_word_embeddings": True, "rope_theta": 500.0},
        (3, 12), 10,
    ),
    "llama-untied": (
        {"model_type": "llama", **TINY, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 24,
         "max_position_embeddings": 64, "tie_word_embeddings": False, "attention_bias": True,
         "mlp_bias": True, "rope_theta": 10000.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8}},
        (3, 12), 6,
    ),
    "mistral": (
        {"model_type": "mistral", **TINY, "num_attention_heads": 8, "num_key_value_heads": 2,
         "max_position_embeddings": 32, "sliding_window": 5, "tie_word_embeddings": False,
         "rope_theta": 1000.0},
        (3, 12), 6,
    ),
    "qwen2": (  # a window of 5 on the second layer only (max_window_layers 1), the first full
        {"model_type": "qwen2", **TINY, "num_attention_heads": 2, "num_key_value_heads": 1,
         "max_position_embeddings": 48, "tie_word_embeddings": False, "rope_theta": 1000000.0,
         "bos_token_id": 5, "eos_token_id": 6, "use_sliding_window": True, "sliding_window": 5,
         "max_window_layers": 1},
        (3, 12), 6,
    ),
    "qwen3": (
        {"model_type": "qwen3", **TINY, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
         "max_position_embeddings": 48, "tie_word_embeddings": True, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-5, "bos_token_id": 5, "eos_token_id": 6},
        (3, 12), 6,
    ),
    "phi3": (
        {"model_type": "phi3", **TINY, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 32, "sliding_window": 6, "tie_word_embeddings": False,
         "rope_theta": 10000.0, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
        (3, 12), 6,
    ),
    "phi3-longrope": (  # the 128k models' scaling: short factors within 8 positions, long ones past them
        {"model_type": "phi3", **TINY, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 32, "original_max_position_embeddings": 8, "tie_word_embeddings": False,
         "rope_theta": 10000.0, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
         "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                          "long_factor": [1.2, 1.9, 2.8, 4.1, 5.9, 8.3, 11.6, 16.0]}},
        (3, 12), 6,
    ),
    "mixtral": (  # 4 experts, 2 a token, on both layers, a window of 6
        {"model_type": "mixtral", **TINY, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 32, "sliding_window": 6, "tie_word_embeddings": False,
         "rope_theta": 1000000.0, "num_local_experts": 4, "num_experts_per_tok": 2},
        (3, 12), 6,
    ),
    "qwen3_moe": (  # 5 experts of width 24, 3 a token, not renormalised, the second layer dense
        {"model_type": "qwen3_moe", **TINY, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "max_position_embeddings": 32, "tie_word_embeddings": False, "rope_theta": 10000.0,
         "num_experts": 5, "num_experts_per_tok": 3, "moe_intermediate_size": 24, "norm_topk_prob": False,
         "mlp_only_layers": [1], "bos_token_id": 5, "eos_token_id": 6},
        (3, 12), 6,
    ),
}  # fmt: skip
GRADIENTS = {"qwen3", "mixtral", "qwen3_moe"}  # gradients against the twins' too
MOE = {"mixtral", "qwen3_moe"}  # their load-balancing loss too
# Greedy decoding by the model's own forward, a token a call through its cache: transformers'
# generate turns Phi-3's longrope past the original context otherwise than its forward does
# (generate's tokens differed from the second decoding step on; this loop's are the forward's).
STEPWISE = {"phi3-longrope"}
SHARDED = {"qwen2", "qwen3"}  # saved in shards, with model.safetensors.index.json
TOKENIZED = {"llama"}  # a tokenizer.json beside the weights
CHARACTERS = "abcdefghijklmnopqrstuvwxyz .,:;!?'\n" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789()[]{}=+-*/_<>#@"


def count(fields: dict) -> int:
    config = AutoConfig.for_model(**fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def randomise(model, generator: torch.Generator) -> None:
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        if "norm" in name:
            p.copy_(1.0 + 0.2 * noise)
        elif name.endswith("bias"):
            p.copy_(0.1 * noise)
        elif "embed_tokens" in name:
            p.copy_(0.5 * noise)
        else:  # nn.Linear (out, in): N(0, 1 / fan_in)
            p.copy_(noise / p.shape[1] ** 0.5)


def padding(batch: int, steps: int) -> np.ndarray:
    """Row 1 left-padded, row 2 (if any) right-padded: True at padding."""
    mask = np.zeros((batch, steps), dtype=bool)
    mask[1, : steps // 3] = True
    if batch > 2:
        mask[2, steps - steps // 4 :] = True
    return mask


def positions(attention: torch.Tensor) -> torch.Tensor:
    """What ``generate`` passes for a padded batch: real tokens count from 0."""
    return (attention.long().cumsum(-1) - 1).clamp(min=0)


def build(fields: dict, seed: int, generator: torch.Generator):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**fields)).eval()
    randomise(model, generator)
    return model


def outputs(model, out: Path, name: str, batch: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Inputs, their padding, eval logits and last hidden states of ``model``, under ``name``."""
    ids = rng.integers(0, model.config.vocab_size, size=(batch, steps), dtype=np.int64)
    pad = padding(batch, steps)
    ids[pad] = 0
    np.save(out / f"{name}-inputs.npy", ids)
    np.save(out / f"{name}-padding.npy", pad)
    attention = torch.from_numpy(~pad).long()
    with torch.no_grad():
        result = model(
            torch.from_numpy(ids),
            attention_mask=attention,
            position_ids=positions(attention),
            output_hidden_states=True,
        )
    np.save(out / f"{name}-logits.npy", result.logits.numpy())
    np.save(out / f"{name}-hidden.npy", result.hidden_states[-1].numpy())
    (out / f"{name}-config.json").write_text(json.dumps(model.config.to_dict(), default=str))
    return ids


def save_tokenizer(folder: Path, vocab_size: int) -> None:
    """A character-level tokenizer.json of ``vocab_size`` tokens at most (fast-tokenizer format)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    for character in CHARACTERS[: vocab_size - len(vocab)]:
        vocab[character] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(["<pad>", "<s>", "</s>"])
    tokenizer.save(str(folder / "tokenizer.json"))


def fixtures(out: Path) -> None:
    (out / "counts.json").write_text(json.dumps({name: count(fields) for name, fields in PUBLISHED.items()}))
    for name, fields in PUBLISHED.items():
        (out / "published" / name).mkdir(parents=True, exist_ok=True)
        (out / "published" / name / "config.json").write_text(json.dumps(fields, indent=2))
    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    for case, (fields, (batch, steps), new_tokens) in CASES.items():
        model = build(fields, SEED, generator)
        model.save_pretrained(out / case, max_shard_size="20KB" if case in SHARDED else "5GB")
        model.model.save_pretrained(out / f"{case}-backbone")
        if case in TOKENIZED:
            save_tokenizer(out / case, fields["vocab_size"])
        ids = outputs(model, out, case, batch, steps, rng)
        prompts, prompt_padding = ids[:2, : steps // 2 + 2].copy(), np.zeros((2, steps // 2 + 2), bool)
        prompt_padding[1, : steps // 3] = True
        prompts[prompt_padding] = 0
        np.save(out / f"{case}-prompts.npy", prompts)
        np.save(out / f"{case}-prompt-padding.npy", prompt_padding)
        decode = stepwise_greedy if case in STEPWISE else greedy
        np.save(out / f"{case}-generated.npy", decode(model, prompts, prompt_padding, new_tokens))
        if case in GRADIENTS:
            gradients(model, out, case, ids, rng)
        if case in MOE:
            np.save(out / f"{case}-aux.npy", balancing_loss(model, ids, np.load(out / f"{case}-padding.npy")))


def random_cases(out: Path, configs: str) -> None:
    generator = torch.Generator().manual_seed(SEED)
    for entry in json.loads(Path(configs).read_text()):
        model = build(entry["config"], entry["seed"], generator)
        model.save_pretrained(out / entry["name"])
        outputs(
            model, out, entry["name"], entry["batch"], entry["steps"], np.random.default_rng(entry["seed"])
        )


def gradients(model, out: Path, name: str, ids: np.ndarray, rng: np.random.Generator) -> None:
    """Each parameter's gradient of ``sum(logits * W)`` on ``ids`` with their padding (eval mode)."""
    pad = np.load(out / f"{name}-padding.npy")
    attention = torch.from_numpy(~pad).long()
    weights = rng.standard_normal((*ids.shape, model.config.vocab_size)).astype(np.float32)
    weights[pad] = 0.0
    np.save(out / f"{name}-weights.npy", weights)
    model.zero_grad()
    logits = model(torch.from_numpy(ids), attention_mask=attention, position_ids=positions(attention)).logits
    (logits * torch.from_numpy(weights)).sum().backward()
    found = {key.removeprefix("model."): p.grad.numpy() for key, p in model.named_parameters()}
    np.savez(out / f"{name}-gradients.npz", **per_expert(found))


def balancing_loss(model, ids: np.ndarray, pad: np.ndarray) -> np.ndarray:
    """transformers' ``aux_loss`` (``output_router_logits=True``) on ``ids`` with their padding."""
    attention = torch.from_numpy(~pad).long()
    with torch.no_grad():
        result = model(torch.from_numpy(ids), attention_mask=attention, position_ids=positions(attention),
                       output_router_logits=True)  # fmt: skip
    return result.aux_loss.numpy()


def per_expert(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """transformers 5 holds a layer's experts stacked (``experts.gate_up_proj`` (E, 2I, H), the gate's
    rows first, and ``experts.down_proj`` (E, H, I)) and saves them one by one: here under the
    names its files use for Qwen3-MoE (``experts.E.gate_proj.weight`` ...), which are zoo's."""
    out = {}
    for key, value in tensors.items():
        stem, _, part = key.rpartition(".experts.")
        if part == "gate_up_proj":
            gates, ups = np.split(value, 2, axis=1)
            for e in range(len(value)):
                out[f"{stem}.experts.{e}.gate_proj.weight"] = gates[e]
                out[f"{stem}.experts.{e}.up_proj.weight"] = ups[e]
        elif part == "down_proj":
            out |= {f"{stem}.experts.{e}.down_proj.weight": down for e, down in enumerate(value)}
        else:
            out[key] = value
    return out


def greedy(model, prompts: np.ndarray, pad: np.ndarray, new_tokens: int) -> np.ndarray:
    """``generate(do_sample=False)`` of exactly ``new_tokens`` tokens: no end-of-text stops it or is
    suppressed (zoo's sampling generates what it is asked for, end-of-text included)."""
    settings = copy.deepcopy(model.generation_config)
    settings.eos_token_id = model.config.vocab_size  # no token id: nothing ends the generation
    with torch.no_grad():
        generated = model.generate(
            torch.from_numpy(prompts),
            attention_mask=torch.from_numpy(~pad).long(),
            generation_config=settings,
            do_sample=False,
            max_new_tokens=new_tokens,
            pad_token_id=0,
        )
    return generated[:, prompts.shape[1] :].numpy()


def stepwise_greedy(model, prompts: np.ndarray, pad: np.ndarray, new_tokens: int) -> np.ndarray:
    """Greedy decoding through ``DynamicCache`` by forward calls, with the position ids and attention
    mask ``generate`` derives from the prompts' padding."""
    from transformers import DynamicCache

    cache, mask = DynamicCache(config=model.config), torch.from_numpy(~pad).long()
    chosen, ids, position = [], torch.from_numpy(prompts), positions(torch.from_numpy(~pad).long())
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(ids, attention_mask=mask, position_ids=position, past_key_values=cache).logits
            ids = logits[:, -1].argmax(-1, keepdim=True)
            chosen.append(ids)
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
            position = mask.sum(-1, keepdim=True) - 1
    return torch.cat(chosen, dim=1).numpy()


def exported(out: Path, folder: str, inputs: str, pad: str, prompts: str | None = None) -> None:
    ids, padding_mask = torch.from_numpy(np.load(inputs)), np.load(pad)
    attention = torch.from_numpy(~padding_mask).long()
    config = AutoConfig.from_pretrained(folder)
    causal = any(name.endswith("ForCausalLM") for name in config.architectures or [])
    loader = AutoModelForCausalLM if causal else AutoModel
    model, info = loader.from_pretrained(folder, output_loading_info=True)
    model.eval()
    with torch.no_grad():
        result = model(ids, attention_mask=attention, position_ids=positions(attention))
    np.save(out / "logits.npy", (result.logits if causal else result.last_hidden_state).numpy())
    loaded = {key: sorted(map(str, value)) for key, value in info.items()}
    embedding = model.get_input_embeddings().weight
    loaded["tied"] = causal and model.lm_head.weight.data_ptr() == embedding.data_ptr()
    loaded["class"] = type(model).__name__
    (out / "loaded.json").write_text(json.dumps(loaded))
    (out / "config.json").write_text(json.dumps(model.config.to_dict(), default=str))
    if prompts is not None:
        generated = [
            greedy(model, np.asarray([prompt]), np.zeros((1, len(prompt)), bool), 8)[0].tolist()
            for prompt in json.loads(prompts)
        ]
        (out / "generated.json").write_text(json.dumps(generated))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exported":
        exported(target, *sys.argv[3:])
    elif len(sys.argv) > 2 and sys.argv[2] == "random":
        random_cases(target, sys.argv[3])
    else:
        fixtures(target)
