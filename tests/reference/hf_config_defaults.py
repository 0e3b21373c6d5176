"""transformers' config classes: what a config.json leaves out (run in the reference environment).

``hf_config_defaults.py OUT`` writes ``OUT/defaults.json``: for each ``model_type`` zoo imports
(gpt2, bert, llama, mistral, qwen2, qwen3, phi3, mixtral, qwen3_moe), the class's ``to_dict()`` as
built with no arguments, with
the rotary wavelength transformers 5 keeps inside ``rope_parameters`` also given as
``rope_theta``, the spelling published files use.
"""

import json
import sys
from pathlib import Path

import shim  # noqa: F401  (before transformers, which imports torchvision)
from transformers import AutoConfig

MODEL_TYPES = ("gpt2", "bert", "llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen3_moe")


def defaults(model_type: str) -> dict:
    config = AutoConfig.for_model(model_type).to_dict()
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
    return config


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "defaults.json").write_text(json.dumps({t: defaults(t) for t in MODEL_TYPES}, indent=1))
