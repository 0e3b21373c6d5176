"""transformers' logits processors and batched ``generate`` as zoo sampling's oracle (run in the
reference environment).

``hf_sampling.py OUT`` writes, for ``tests/test_sampling.py``:

- ``scores.npz``: random float32 ``logits`` (6, 50), the ``ids`` read so far (6, 9, the first
  rows left-padded as ``padding`` says, True at padding) and, for each setting of ``SETTINGS``,
  ``processed-I``: what the ``LogitsProcessorList`` transformers' ``generate`` builds from those
  settings (``_get_logits_processor``: repetition penalty, then temperature, top-k, top-p)
  makes of the logits, given the ids and the attention mask; ``settings.json``, the settings;
- ``gpt2/`` and ``llama/`` (with a character ``tokenizer.json``): tiny ``*ForCausalLM`` models
  (``hf_gpt2.randomise`` / ``hf_llama.build``, random weights), saved by ``save_pretrained``;
- ``gpt2-prompts.npy`` (left-padded, ``gpt2-prompt-padding.npy``) and ``gpt2-penalised.npy``:
  greedy ``generate`` with ``repetition_penalty`` ``PENALTY`` (the new tokens only);
- ``llama-texts.json``: ``TEXTS`` through the tokenizer with left padding and greedy ``generate``
  (``{"texts": TEXTS, "plain": [...], "penalised": [...]}``, the new token ids of each text).

The models come from ``hf_gpt2``'s and ``hf_llama``'s helpers, which the fixture cache key does
not cover: a change there reaches these fixtures with the next change of this file.
"""

import json
import sys
from pathlib import Path

import hf_gpt2
import hf_llama
import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

SEED = 0
SETTINGS = [
    {"temperature": 0.7},
    {"temperature": 1.3, "top_k": 7},
    {"temperature": 0.9, "top_p": 0.8},
    {"temperature": 1.0, "top_k": 20, "top_p": 0.6},
    {"repetition_penalty": 1.5},
    {"temperature": 0.8, "top_k": 10, "top_p": 0.9, "repetition_penalty": 1.3},
]
PENALTY = 1.5
NEW = 10
TEXTS = ["Hello there, ", "a", "The cat sat on the mat. The cat"]


def processed(model, out: Path) -> None:
    rng = np.random.default_rng(SEED)
    logits = (3 * rng.normal(size=(6, 50))).astype(np.float32)
    ids = rng.integers(0, 50, size=(6, 9))
    padding = np.zeros(ids.shape, bool)
    padding[0, :3], padding[1, :1] = True, True
    ids[padding] = 0
    arrays = {"logits": logits, "ids": ids, "padding": padding}
    mask = torch.from_numpy(~padding).long()
    for i, setting in enumerate(SETTINGS):
        config = GenerationConfig(
            **{"do_sample": "temperature" in setting, "top_k": 0, "top_p": 1.0, **setting}
        )
        processors = model._get_logits_processor(
            config, input_ids_seq_length=ids.shape[1], model_kwargs={"attention_mask": mask}
        )
        scores = processors(torch.from_numpy(ids), torch.from_numpy(logits).clone())
        arrays[f"processed-{i}"] = scores.numpy()
    np.savez(out / "scores.npz", **arrays)
    (out / "settings.json").write_text(json.dumps(SETTINGS))


def generated(model, prompts: torch.Tensor, mask: torch.Tensor, **settings) -> torch.Tensor:
    config = GenerationConfig(
        do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0, eos_token_id=None, **settings
    )
    with torch.no_grad():
        return model.generate(prompts, attention_mask=mask, generation_config=config)[:, prompts.shape[1] :]


def gpt2(out: Path) -> GPT2LMHeadModel:
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=32, vocab_size=101)).eval()
    hf_gpt2.randomise(model, torch.Generator().manual_seed(SEED))
    model.save_pretrained(out / "gpt2")
    prompts = np.random.default_rng(SEED).integers(0, 8, size=(3, 8))  # few ids: repetitions
    padding = np.zeros(prompts.shape, bool)
    padding[1, :3], padding[2, :5] = True, True
    prompts[padding] = 0
    np.save(out / "gpt2-prompts.npy", prompts)
    np.save(out / "gpt2-prompt-padding.npy", padding)
    mask = torch.from_numpy(~padding).long()
    penalised = generated(model, torch.from_numpy(prompts), mask, repetition_penalty=PENALTY)
    np.save(out / "gpt2-penalised.npy", penalised.numpy())
    return model


def llama(out: Path) -> None:
    fields = hf_llama.CASES["llama"][0]
    model = hf_llama.build(fields, SEED, torch.Generator().manual_seed(SEED))
    model.save_pretrained(out / "llama")
    hf_llama.save_tokenizer(out / "llama", fields["vocab_size"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(out / "llama" / "tokenizer.json"), pad_token="<pad>", padding_side="left"
    )
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    texts = {"texts": TEXTS}
    for name, settings in (("plain", {}), ("penalised", {"repetition_penalty": PENALTY})):
        new = generated(model, batch["input_ids"], batch["attention_mask"], **settings)
        texts[name] = new.tolist()
    (out / "llama-texts.json").write_text(json.dumps(texts))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    processed(gpt2(target), target)
    llama(target)
