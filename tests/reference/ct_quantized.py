"""compressed-tensors as the oracle of ``zoo import`` of quantized transformers models (run in the
reference environment).

``ct_quantized.py OUT`` writes, for each case of ``CASES``, a tiny random transformers model
(seeded, float32 unless the case says bfloat16, norms randomised so that no weight is trivial)
quantized by compressed-tensors' own API, as its users save one:

- ``apply_quantization_config`` attaches the case's scheme (``QuantizationArgs``: bits, strategy,
  group size, symmetry; activations for the cases zoo refuses) to the ``Linear`` layers it
  targets, less its ``ignore`` list;
- each weight's scales (and zero points) are compressed-tensors' ``calculate_qparams`` of the
  weight's minima and maxima per output row (``channel``) or per group of inputs (``group``):
  what llmcompressor's memoryless min-max observer gives, without calibration data, which weight
  scales do not need;
- ``ModelCompressor.from_pretrained_model(model, FORMAT).compress_model``, ``save_pretrained`` and
  ``update_config`` write ``CASE/`` (``config.json`` with its ``quantization_config``, and the
  integers as the format stores them).

Then transformers' own loader reads ``CASE/`` back (``AutoModelForCausalLM.from_pretrained``, which
dequantizes through compressed-tensors), and writes ``CASE-inputs.npy``, its eval logits on them,
``CASE-logits.npy`` (float32), and ``CASE-weights.npz``: its loaded weights, as float32, under the
names of its state dict. The cases zoo refuses (``load`` false: a zero point, quantized
activations, a quantized head tied to the float embedding) are written and not loaded.

Measured with compressed-tensors 0.20.1: gpt2's projections are transformers ``Conv1D`` modules,
not ``Linear``, so ``targets: [Linear]`` quantizes none of them, and with ``lm_head`` ignored
nothing at all: ``update_config`` then writes no ``quantization_config`` (``gpt2-int8`` is a float
model). A quantized ``lm_head`` tied to the embedding (``qwen2-tied-head``) is saved as integers
beside the float embedding, which transformers loads untied.
"""

import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    apply_quantization_config,
)
from compressed_tensors.quantization.utils import calculate_qparams
from transformers import AutoConfig, AutoModelForCausalLM

SEED = 0
LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "tie_word_embeddings": False,
}  # fmt: skip
QWEN2_TIED = {
    **LLAMA, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "tie_word_embeddings": True,
}  # fmt: skip
GPT2 = {
    "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 96, "n_embd": 32,
    "n_layer": 2, "n_head": 4, "n_positions": 64, "tie_word_embeddings": True,
}  # fmt: skip
INT8 = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}
INT4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 16, "symmetric": True}
CASES = {
    # name: (config, weights' args, input activations' args, format, ignore, dtype, load)
    "llama-int8": (LLAMA, INT8, None, "int-quantized", ["lm_head"], "float32", True),
    "llama-int8-packed": (LLAMA, INT8, None, "pack-quantized", ["lm_head"], "float32", True),
    "llama-int4": (LLAMA, INT4, None, "pack-quantized", [], "float32", True),
    "llama-int4-bf16": (LLAMA, INT4, None, "pack-quantized", ["lm_head"], "bfloat16", True),
    "qwen2-tied-int4": (QWEN2_TIED, INT4, None, "pack-quantized", ["lm_head"], "float32", True),
    "qwen2-tied-head": (QWEN2_TIED, INT8, None, "pack-quantized", [], "float32", False),
    "gpt2-int8": (GPT2, INT8, None, "int-quantized", ["lm_head"], "float32", True),
    "llama-int4-asym": (
        LLAMA, {**INT4, "symmetric": False}, None, "pack-quantized", ["lm_head"], "float32", False,
    ),
    "llama-w8a8": (
        LLAMA, INT8, {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": True, "dynamic": True},
        "int-quantized", ["lm_head"], "float32", False,
    ),
}  # fmt: skip


def build(fields: dict, dtype: str):
    """The model, seeded, its norms and biases drawn too (initialisation leaves them trivial)."""
    torch.manual_seed(SEED)
    config = AutoConfig.for_model(**fields)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim == 1:
                parameter.copy_(1 + 0.1 * torch.randn(parameter.shape, generator=generator))
    return model.to(getattr(torch, dtype))


def observe(model) -> None:
    """Each quantized module's scales (and zero points): compressed-tensors' ``calculate_qparams``
    of its weight's minima and maxima per row or per group."""
    for module in model.modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None or scheme.weights is None:
            continue
        args, weight = scheme.weights, module.weight.detach()
        grouped = weight.unflatten(-1, (-1, args.group_size)) if args.group_size else weight.unsqueeze(-2)
        low, high = grouped.amin(dim=-1), grouped.amax(dim=-1)
        scale, zero_point = calculate_qparams(low, high, args)
        module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
        if hasattr(module, "weight_zero_point"):
            module.weight_zero_point.data.copy_(zero_point.reshape(module.weight_zero_point.shape))


def quantized(fields: dict, weights: dict, activations: dict | None, ignore: list, dtype: str):
    model = build(fields, dtype)
    scheme = QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(**weights),
        input_activations=QuantizationArgs(**activations) if activations else None,
    )
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=ignore)
    apply_quantization_config(model, config)
    observe(model)
    return model


def save(model, fmt: str, folder: Path) -> None:
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=fmt)
    compressor.compress_model(model)
    model.save_pretrained(folder)
    compressor.update_config(str(folder))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for case, (fields, weights, activations, fmt, ignore, dtype, load) in CASES.items():
        model = quantized(fields, weights, activations, ignore, dtype)
        save(model, fmt, out / case)
        if not load:
            continue
        loaded = AutoModelForCausalLM.from_pretrained(out / case).eval()
        ids = rng.integers(0, fields["vocab_size"], size=(2, 7))
        with torch.no_grad():
            logits = loaded(input_ids=torch.from_numpy(ids)).logits
        np.save(out / f"{case}-inputs.npy", ids)
        np.save(out / f"{case}-logits.npy", logits.float().numpy())
        state = {name: value.float().numpy() for name, value in loaded.state_dict().items()}
        np.savez(out / f"{case}-weights.npz", **state)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
