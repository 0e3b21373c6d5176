"""A config.json that leaves a field out imports as transformers reads it: with the default of
that ``model_type``'s config class, from one table per family checked against the classes.

Published and hand-written config.json files often leave fields at their class default
(a Llama ``config.json`` without ``rms_norm_eps`` is 1e-6 to transformers). zoo's own config
defaults are its presets', so each family keeps ``HF_DEFAULTS`` (in ``formats.py``; in
``config_json.py`` for BERT and Llama): this file checks every value against
``AutoConfig.for_model(model_type)`` in the reference environment, that every config.json field
the import reads (and no tensor shape shows) has its entry, and that leaving each one out
imports exactly as writing transformers' default would.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy

from architectures.bert import config_json as bert_config_json
from architectures.bert import formats as bert
from architectures.gpt2 import formats as gpt2
from architectures.llama import config_json as llama_config_json
from architectures.llama import formats as llama
from zoo.checkpoint.foreign import ForeignLayoutError

TABLES = {
    "gpt2": gpt2.HF_DEFAULTS,
    "bert": bert_config_json.HF_DEFAULTS,
    **{model_type: llama_config_json.HF_DEFAULTS[model_type] for model_type in llama_config_json.CLASSES},
}
# (family's formats module, reference script, case folder) for each model_type's import.
CASES = {
    "gpt2": (gpt2, "hf_gpt2.py", "tiny"),
    "bert": (bert, "hf_bert.py", "mlm"),
    "llama": (llama, "hf_llama.py", "llama"),
    "mistral": (llama, "hf_llama.py", "mistral"),
    "qwen2": (llama, "hf_llama.py", "qwen2"),
    "qwen3": (llama, "hf_llama.py", "qwen3"),
    "phi3": (llama, "hf_llama.py", "phi3"),
    "mixtral": (llama, "hf_llama.py", "mixtral"),
    "qwen3_moe": (llama, "hf_llama.py", "qwen3_moe"),
}


@pytest.fixture(scope="module")
def transformers_defaults() -> dict[str, dict]:
    folder = reference_env.fixtures("hf_config_defaults.py")
    return json.loads((folder / "defaults.json").read_text())


def _files(script: str, case: str) -> tuple[dict[str, np.ndarray], dict]:
    folder = reference_env.fixtures(script) / case
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        tensors |= safetensors.numpy.load_file(path)
    return tensors, json.loads((folder / "config.json").read_text())


@pytest.mark.parametrize("model_type", sorted(TABLES))
def test_each_default_is_the_config_class_default(transformers_defaults, model_type):
    theirs = transformers_defaults[model_type]
    wrong = {key: (value, theirs.get(key, "<absent>")) for key, value in TABLES[model_type].items()
             if key not in theirs or theirs[key] != value}  # fmt: skip
    assert wrong == {}, f"zoo's table vs transformers' {model_type} default: {wrong}"


def test_every_field_the_import_reads_has_a_default():
    """What the shapes decide needs none (a default there would disagree with the tensors)."""
    shaped = {"hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"}
    for model_type in llama_config_json.CLASSES:
        assert set(llama_config_json._FIELDS) - shaped <= set(TABLES[model_type]), model_type
    assert set(gpt2._FIELDS) - {"n_embd", "n_layer", "n_positions", "vocab_size"} <= set(TABLES["gpt2"])
    # transformers 5's BertConfig has no position_embedding_type (absolute is all it computes)
    required = set(bert_config_json._REQUIRED) - {"model_type", "position_embedding_type"}
    assert set(bert_config_json._META_FIELDS) | required <= set(TABLES["bert"])


def _outcome(module, tensors: dict, meta: dict):
    try:
        return module.from_hf(tensors, meta)[0]
    except ForeignLayoutError as error:
        return type(error), str(error).split(" (", 1)[0]


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_a_left_out_field_imports_as_its_transformers_default(transformers_defaults, model_type):
    module, script, case = CASES[model_type]
    tensors, meta = _files(script, case)
    assert meta.get("model_type", model_type) == model_type
    for key in TABLES[model_type]:
        left_out = {k: v for k, v in meta.items() if k != key and not (key == "rope_theta" and "rope" in k)}
        written = {**left_out, key: transformers_defaults[model_type][key]}
        assert _outcome(module, tensors, left_out) == _outcome(module, tensors, written), key


def test_a_llama_config_without_rms_norm_eps_exports_what_transformers_used(tmp_path: Path):
    """The bug this table fixed: 1e-5 (zoo's preset default) was read and exported back."""
    tensors, meta = _files("hf_llama.py", "llama")
    del meta["rms_norm_eps"]
    fields, _ = llama.from_hf(tensors, meta)
    assert fields["rms_norm_eps"] == 1e-6
    from zoo import registry

    cfg = registry.resolve_config(
        "llama", **{k: v for k, v in fields.items() if k != "task"}, task=fields["task"]
    )
    assert llama_config_json.hf_config(cfg)["rms_norm_eps"] == 1e-6
