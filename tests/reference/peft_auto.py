"""What a PEFT user does with zoo's exports (run in the reference environment).

``peft_auto.py OUT PEFT_DIR HF_DIR INPUTS``: ``AutoPeftModelForCausalLM.from_pretrained(PEFT_DIR)``
(which loads the base its adapter_config.json names) on the token ids INPUTS (.npy) ->
``OUT/auto-logits.npy``; ``AutoTokenizer`` of HF_DIR and of PEFT_DIR -> their special tokens and the
ids of a text in ``OUT/tokenizers.json``.
"""

import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before transformers, which imports torchvision)
import torch
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer


def main(out: Path, peft_dir: str, hf_dir: str, inputs: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model = AutoPeftModelForCausalLM.from_pretrained(peft_dir).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(np.load(inputs))).logits
    np.save(out / "auto-logits.npy", logits.float().numpy())
    found = {}
    for name, folder in (("hf", hf_dir), ("peft", peft_dir)):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        found[name] = {
            "eos_token": tokenizer.eos_token, "eos_token_id": tokenizer.eos_token_id,
            "bos_token": tokenizer.bos_token, "ids": tokenizer("ab<|endoftext|>")["input_ids"],
        }  # fmt: skip
    (out / "tokenizers.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
