"""transformers' GPT-2 as the gpt2 family's oracle (run in the reference environment).

``hf_gpt2.py OUT`` writes, for the tests in zoo's environment:

- ``counts.json``: parameters of ``GPT2LMHeadModel`` at transformers' gpt2 and gpt2-medium shapes
  (built on the meta device; ``parameters()`` yields the tied head once);
- for each case (``tiny``: 2 blocks, width 64, 4 heads, 32 positions, vocabulary 101, batch 3 of
  12 tokens; ``gpt2``: transformers' default ``GPT2Config``, batch 2 of 8 tokens): a
  ``GPT2LMHeadModel`` seeded, with every LayerNorm weight and bias and every other bias
  randomised and the embeddings widened (the tied head's logits then differ by far more than
  float32 rounding, so greedy decoding has no near-ties), written by ``save_pretrained`` to
  ``CASE/``; its backbone alone (``GPT2Model``) to ``CASE-backbone/``; ``CASE-inputs.npy``,
  ``CASE-padding.npy`` (True at padding: a left-padded and a right-padded row) and, in eval mode
  with that attention mask and the position ids ``generate`` derives from it,
  ``CASE-logits.npy`` and ``CASE-hidden.npy`` (the backbone's last hidden state);
- ``CASE-generated.npy``: ``generate(do_sample=False)`` from ``CASE-prompts.npy`` (left-padded,
  ``CASE-prompt-padding.npy``), the new tokens only; ``tiny-alone.npy``: the same from the
  left-padded prompt without its padding, which shows padding changes nothing.

``hf_gpt2.py OUT exported DIR INPUTS PADDING`` loads what zoo exported to DIR with
``AutoModelForCausalLM.from_pretrained`` and writes its eval logits (``logits.npy``) and, in
``loaded.json``, the keys transformers reported missing, unexpected or mismatched (the tied
``lm_head.weight`` is re-tied, not missing) and whether the head is the embedding.
"""

import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

SEED = 0
CASES = {
    "tiny": (dict(n_embd=64, n_layer=2, n_head=4, n_positions=32, vocab_size=101), (3, 12), 10),
    "gpt2": ({}, (2, 8), 5),
}
MEDIUM = dict(n_embd=1024, n_layer=24, n_head=16)


def count(**fields) -> int:
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config(**fields))
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def randomise(model: GPT2LMHeadModel, generator: torch.Generator) -> None:
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        if ".ln_" in name:
            p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
        elif name.endswith("bias"):
            p.copy_(0.1 * noise)
        elif name.endswith("wte.weight"):
            p.copy_(0.5 * noise)
        elif name.endswith("wpe.weight"):
            p.copy_(0.2 * noise)
        elif p.ndim == 2:  # a Conv1D, [in, out]: N(0, 1 / fan_in)
            p.copy_(noise / p.shape[0] ** 0.5)


def padding(batch: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Row 1 left-padded, row 2 (if any) right-padded: True at padding."""
    mask = np.zeros((batch, steps), dtype=bool)
    mask[1, : steps // 3] = True
    if batch > 2:
        mask[2, steps - steps // 4 :] = True
    return mask


def positions(attention: torch.Tensor) -> torch.Tensor:
    """What ``generate`` passes for a padded batch: real tokens count from 0."""
    return (attention.long().cumsum(-1) - 1).clamp(min=0)


def fixtures(out: Path) -> None:
    (out / "counts.json").write_text(json.dumps({"gpt2": count(), "gpt2-medium": count(**MEDIUM)}))
    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    for case, (fields, (batch, steps), new_tokens) in CASES.items():
        torch.manual_seed(SEED)
        model = GPT2LMHeadModel(GPT2Config(**fields)).eval()
        randomise(model, generator)
        assert model.lm_head.weight is model.transformer.wte.weight
        model.save_pretrained(out / case)
        model.transformer.save_pretrained(out / f"{case}-backbone")
        vocab = model.config.vocab_size
        ids = rng.integers(0, vocab, size=(batch, steps), dtype=np.int64)
        pad = padding(batch, steps, rng)
        ids[pad] = 0
        np.save(out / f"{case}-inputs.npy", ids)
        np.save(out / f"{case}-padding.npy", pad)
        attention = torch.from_numpy(~pad).long()
        with torch.no_grad():
            result = model(
                torch.from_numpy(ids),
                attention_mask=attention,
                position_ids=positions(attention),
                output_hidden_states=True,
            )
        np.save(out / f"{case}-logits.npy", result.logits.numpy())
        np.save(out / f"{case}-hidden.npy", result.hidden_states[-1].numpy())

        prompts, prompt_padding = ids[:2, : steps // 2 + 2].copy(), np.zeros((2, steps // 2 + 2), bool)
        prompt_padding[1, : steps // 3] = True
        prompts[prompt_padding] = 0
        np.save(out / f"{case}-prompts.npy", prompts)
        np.save(out / f"{case}-prompt-padding.npy", prompt_padding)
        np.save(out / f"{case}-generated.npy", greedy(model, prompts, prompt_padding, new_tokens))
        if case == "tiny":
            alone = prompts[1:, steps // 3 :]
            np.save(out / "tiny-alone.npy", greedy(model, alone, np.zeros_like(alone, bool), new_tokens))


def greedy(model, prompts: np.ndarray, pad: np.ndarray, new_tokens: int) -> np.ndarray:
    with torch.no_grad():
        generated = model.generate(
            torch.from_numpy(prompts),
            attention_mask=torch.from_numpy(~pad).long(),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=0,
        )
    return generated[:, prompts.shape[1] :].numpy()


def exported(out: Path, folder: str, inputs: str, pad: str) -> None:
    ids, padding_mask = torch.from_numpy(np.load(inputs)), np.load(pad)
    attention = torch.from_numpy(~padding_mask).long()
    model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    model.eval()
    with torch.no_grad():
        logits = model(ids, attention_mask=attention, position_ids=positions(attention)).logits
    np.save(out / "logits.npy", logits.numpy())
    loaded = {key: sorted(map(str, value)) for key, value in info.items()}
    loaded["tied"] = model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    loaded["class"] = type(model).__name__
    (out / "loaded.json").write_text(json.dumps(loaded))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exported":
        exported(target, *sys.argv[3:6])
    else:
        fixtures(target)
