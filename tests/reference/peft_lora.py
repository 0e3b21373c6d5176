"""PEFT as the oracle of zoo's LoRA (run in the reference environment).

``peft_lora.py OUT MODEL INPUTS [ZOO_ADAPTER]`` loads the transformers model zoo exported to MODEL
(the class its config.json names) and, in eval mode on the
token ids INPUTS (.npy):

- with ZOO_ADAPTER (a PEFT folder ``zoo export --format peft`` wrote): ``PeftModel.from_pretrained``
  puts it on the model; writes ``exported-logits.npy``, and ``exported-merged-logits.npy`` after
  ``merge_and_unload``;
- always: a PEFT adapter made here (``get_peft_model`` with PEFT's default targets for the model
  type, ``TARGETS`` where it has none, rank 4, alpha 8, then every B drawn from a normal so that
  it changes the logits; seed 0),
  saved by ``save_pretrained`` to ``OUT/made``, and its logits, ``made-logits.npy``, and PEFT's
  trainable-parameter count in ``made.json``.
"""

import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoConfig

# Model types PEFT has no default targets for: what its users name (Phi-3's fused projections;
# Mixtral's attention, its experts being parameters of one module in transformers 5).
TARGETS = {"phi3": ["qkv_proj", "o_proj", "gate_up_proj"], "mixtral": ["q_proj", "k_proj", "o_proj"]}


def load(folder: str):
    """The model class config.json names (GPT2LMHeadModel, BertForMaskedLM, LlamaForCausalLM...)."""
    config = AutoConfig.from_pretrained(folder)
    return getattr(transformers, config.architectures[0]).from_pretrained(folder).eval()


def logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids))
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).float().numpy()


def main(out: Path, folder: str, inputs: str, exported: str | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ids = np.load(inputs)
    if exported:
        model = PeftModel.from_pretrained(load(folder), exported).eval()
        np.save(out / "exported-logits.npy", logits(model, ids))
        np.save(out / "exported-merged-logits.npy", logits(model.merge_and_unload(), ids))
    torch.manual_seed(0)
    base = load(folder)
    targets = TARGETS.get(base.config.model_type)  # None: PEFT's default for the model type
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.1)
    model.eval()
    trainable, total = model.get_nb_trainable_parameters()
    model.save_pretrained(out / "made")
    np.save(out / "made-logits.npy", logits(model, ids))
    (out / "made.json").write_text(json.dumps({"trainable": trainable, "total": total}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
