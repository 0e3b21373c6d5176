"""PEFT adapter files as PEFT users have them: made by PEFT itself, read exactly or refused.

``tests/reference/peft_matrix.py`` makes, in the reference environment and once (cached), tiny
GPT-2, Llama, Gemma 3 and BERT models and PEFT adapters on them over a matrix of options (targets
including embeddings and all-linear, modules_to_save, lora_bias, rsLoRA, rank and alpha
patterns), with PEFT's logits and ``merge_and_unload``'s. Each is imported with ``zoo import``,
run in both twins, merged with ``zoo merge`` and exported with ``zoo export --format peft``;
PEFT loads every export at once (one more reference run). Then each way an adapter file or its
config can be wrong: exit 2, one line, nothing written.
"""

from __future__ import annotations

import json
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import reference_env
from click.testing import CliRunner
from conftest import relative_error
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from zoo.cli import main
from zoo.interchange.importing import import_checkpoint

PEFT = 1e-5  # relative to the largest |logit| of PEFT's: float32 against float32
CASES = (
    "gpt2-attn-mlp", "gpt2-embedding", "gpt2-bias-rslora", "gpt2-all-linear", "llama-patterns-head",
    "llama-embedding-rslora", "llama-all-linear", "gemma-attn-mlp", "bert-qv-bias", "bert-embedding",
    "bert-all-linear",
)  # fmt: skip


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_refusal(result, *words: str) -> str:
    message = result.output.strip()
    assert result.exit_code == 2 and len(message.splitlines()) == 1, message
    assert "Traceback" not in message, message
    for word in words:
        assert word in message, message
    return message


@pytest.fixture(scope="module")
def made() -> Path:
    return reference_env.fixtures("peft_matrix.py", "make")


@pytest.fixture(scope="module")
def zoo_side(made, tmp_path_factory) -> Path:
    """Each family's base imported, each case's adapter imported, merged and exported by zoo's
    commands."""
    out = tmp_path_factory.mktemp("peft-matrix")
    assert set(json.loads((made / "cases.json").read_text())) == set(CASES)
    for family in ("gpt2", "llama", "gemma", "bert"):
        import_checkpoint(made / f"base-{family}", out / f"base-{family}.safetensors")
    for case in CASES:
        base = out / f"base-{case.split('-')[0]}.safetensors"
        steps = (
            ["import", made / case / "adapter", "--base", base, "--out", out / f"{case}.safetensors"],
            ["merge", out / f"{case}.safetensors", "--out", out / f"{case}-merged.safetensors"],
            ["export", out / f"{case}.safetensors", "--format", "peft", "--out", out / "exported" / case],
        )
        for step in steps:
            done = invoke(*step)
            assert done.exit_code == 0, (case, step[0], done.output)
    return out


@pytest.fixture(scope="module")
def peft_loaded(made, zoo_side) -> Path:
    """PEFT's logits with each of zoo's exports, on the base PEFT made it for (one run)."""
    return reference_env.run(
        "peft_matrix.py", zoo_side / "peft-loaded", "load", str(made), str(zoo_side / "exported")
    )


def logits(model, ids: np.ndarray) -> np.ndarray:
    if hasattr(model, "state_dict"):
        import torch

        with torch.no_grad():
            return model.eval()(torch.from_numpy(ids)).numpy()
    return np.asarray(model(ids))


@pytest.mark.parametrize("case", CASES)
def test_peft_s_adapter_imports_merges_and_exports_exactly(case, made, zoo_side, peft_loaded):
    """Both twins give PEFT's logits, zoo merge gives merge_and_unload's, and PEFT loading
    zoo's export gives its own logits again."""
    from zoo.backend import load_checkpoint
    from zoo.lora import load_adapter

    ids = np.load(made / "ids.npy")
    expected = np.load(made / case / "logits.npy")
    for framework in ("lightning", "keras"):
        got = logits(load_adapter(zoo_side / f"{case}.safetensors", framework), ids)
        assert relative_error(got, expected) <= PEFT, framework
    merged = logits(load_checkpoint(zoo_side / f"{case}-merged.safetensors", "lightning"), ids)
    assert relative_error(merged, np.load(made / case / "merged.npy")) <= PEFT
    assert relative_error(np.load(peft_loaded / f"{case}.npy"), expected) <= PEFT


def test_every_tensor_of_the_file_is_used(made, zoo_side):
    """The options the matrix covers land in zoo's adapter: embedding points, B's biases, the
    saved modules' tensors (which replace the base's and stay out of its digest)."""
    from zoo.lora import read_adapter

    embedding = read_adapter(zoo_side / "llama-embedding-rslora.safetensors")
    assert "embed_tokens" in [p.name for p in embedding.adapter.points]
    biased = read_adapter(zoo_side / "gpt2-bias-rslora.safetensors")
    assert biased.adapter.lora_bias and "h.0.attn.q.lora_bias" in biased.tensors
    head = read_adapter(zoo_side / "llama-patterns-head.safetensors")
    assert head.adapter.saved == ("lm_head.weight",)
    stored = load_file(str(made / "llama-patterns-head" / "adapter" / "adapter_model.safetensors"))
    np.testing.assert_array_equal(head.tensors["lm_head.weight"], stored["base_model.model.lm_head.weight"])
    exported = json.loads((zoo_side / "exported" / "bert-qv-bias" / "adapter_config.json").read_text())
    assert exported["lora_bias"] is True
    assert exported["modules_to_save"] == ["cls.predictions.transform.dense"]


# ------------------------------------------------------------------------- refusals


@pytest.fixture
def peft_folder(made, tmp_path) -> Path:
    """A copy of a PEFT adapter (Llama: an embedding, q_proj and down_proj adapted)."""
    folder = tmp_path / "peft"
    shutil.copytree(made / "llama-embedding-rslora" / "adapter", folder)
    return folder


@pytest.fixture(scope="module")
def llama_base(zoo_side) -> Path:
    return zoo_side / "base-llama.safetensors"


def refused_import(folder: Path, base: Path, *words: str) -> str:
    out = folder.parent / "out"
    message = one_line_refusal(invoke("import", folder, "--base", base, "--out", out), *words)
    assert not out.exists()
    return message


def edit_config(folder: Path, **changes) -> None:
    path = folder / "adapter_config.json"
    settings = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            settings.pop(key)
        else:
            settings[key] = value
    path.write_text(json.dumps(settings))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"r": None}, ("r is missing",)),
        ({"lora_alpha": None}, ("lora_alpha is missing",)),
        ({"r": "four"}, ("r is 'four'",)),
        ({"r": 0}, ("r is 0", "greater than 0")),
        ({"r": -4}, ("r is -4",)),
        ({"lora_alpha": float("nan")}, ("lora_alpha is nan", "finite")),
        ({"lora_alpha": float("inf")}, ("lora_alpha is inf", "finite")),
        ({"lora_dropout": 2.0}, ("lora_dropout is 2.0",)),
        ({"rank_pattern": {"q_proj": 0}}, ("rank_pattern.q_proj is 0",)),
        ({"use_dora": True}, ("DoRA", "use_dora")),
        ({"layer_replication": [[0, 1]]}, ("layer_replication",)),
        ({"peft_type": "IA3"}, ("IA3",)),
        ({"bias": "all"}, ("bias is 'all'",)),
        ({"init_lora_weights": "pissa"}, ("pissa",)),
        ({"target_modules": ["q_proj", "nothing_here"]}, ("'nothing_here'", "no module")),
        ({"target_modules": ["q_proj", "embed_tokens"]}, ("down_proj", "does not name")),
        ({"r": 8}, ("lora_embedding_A is [4, 101], but [8, 101]", "rank")),
    ],
)
def test_a_bad_adapter_config_is_refused_naming_the_field(changes, words, peft_folder, llama_base):
    edit_config(peft_folder, **changes)
    refused_import(peft_folder, llama_base, "adapter_config.json", *words)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b'{"r": 4,', ("is not JSON",)),
        (b"[1, 2]", ("a JSON array, not an object",)),
        (b'{"r": "\xff\xfe"}', ("not UTF-8",)),
        (b"[" * 5000 + b"]" * 5000, ("levels deep",)),
    ],
)
def test_an_adapter_config_that_is_not_a_json_object_is_refused(text, words, peft_folder, llama_base):
    (peft_folder / "adapter_config.json").write_bytes(text)
    refused_import(peft_folder, llama_base, "adapter_config.json", *words)


Q = "base_model.model.model.layers.0.self_attn.q_proj"


def edit_weights(folder: Path, change) -> None:
    path = folder / "adapter_model.safetensors"
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def _unknown(t):
    t[f"{Q}.lora_C.weight"] = t[f"{Q}.lora_A.weight"]


def _no_a(t):
    del t[f"{Q}.lora_A.weight"]


def _no_embedding_b(t):
    del t["base_model.model.model.embed_tokens.lora_embedding_B"]


def _no_lora(t):
    t.clear()


def _wide_a(t):
    t[f"{Q}.lora_A.weight"] = np.zeros((4, 33), np.float32)


def _wrong_b(t):
    t[f"{Q}.lora_B.weight"] = np.zeros((31, 4), np.float32)


def _b_rank(t):
    t[f"{Q}.lora_B.weight"] = np.zeros((32, 3), np.float32)


def _stray(t):
    t["base_model.model.model.norm.weight"] = np.ones(32, np.float32)


def _bias(t):
    t[f"{Q}.lora_B.bias"] = np.ones(32, np.float32)


def _untargeted(t):
    t["base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight"] = np.zeros((4, 32), np.float32)
    t["base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"] = np.zeros((16, 4), np.float32)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (_unknown, ("q_proj.lora_C.weight", "LoRA tensor zoo does not know")),
        (_no_a, ("not base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",)),
        (_no_embedding_b, ("not base_model.model.model.embed_tokens.lora_embedding_B",)),
        (_no_lora, ("holds no LoRA tensors",)),
        (_wide_a, ("q_proj.lora_A.weight is [4, 33], but [4, 32]",)),
        (_wrong_b, ("q_proj.lora_B.weight is [31, 4], but [32, 4]",)),
        (_b_rank, ("q_proj.lora_B.weight is [32, 3], but [32, 4]", "rank")),
        (_stray, ("model.norm.weight", "modules_to_save")),
        (_bias, ("lora_B.bias", "lora_bias false")),
        (_untargeted, ("v_proj", "does not name")),
    ],
)
def test_a_tensor_the_import_cannot_use_is_refused_naming_it(change, words, peft_folder, llama_base):
    edit_weights(peft_folder, change)
    refused_import(peft_folder, llama_base, "adapter_model.safetensors", *words)


def _pickle(path: Path) -> None:
    path.write_bytes(pickle.dumps({"a": [1.0, 2.0]}, protocol=2))


def _torch_zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({}))


@pytest.mark.parametrize(
    ("write", "words"),
    [
        (lambda p: p.write_bytes(b""), ("not a safetensors file",)),
        (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), ("not a safetensors file",)),
        (_pickle, ("pickled",)),
        (_torch_zip, ("pickled",)),
    ],
)
def test_a_weights_file_that_is_not_safetensors_is_refused(write, words, peft_folder, llama_base):
    write(peft_folder / "adapter_model.safetensors")
    refused_import(peft_folder, llama_base, "adapter_model.safetensors", *words)


def test_older_peft_s_nulls_read_as_defaults_and_a_pickled_folder_is_refused(peft_folder, llama_base):
    settings = json.loads((peft_folder / "adapter_config.json").read_text())
    settings |= {"lora_dropout": None, "rank_pattern": None, "alpha_pattern": None}
    (peft_folder / "adapter_config.json").write_text(json.dumps(settings))
    done = invoke("import", peft_folder, "--base", llama_base, "--out", peft_folder.parent / "ok")
    assert done.exit_code == 0, done.output
    (peft_folder / "adapter_model.safetensors").rename(peft_folder / "adapter_model.bin")
    refused_import(peft_folder, llama_base, "adapter_model.bin", "safe_serialization=True")


def test_a_saved_head_that_zoo_ties_to_its_embedding_is_refused(made, zoo_side, tmp_path):
    """GPT-2's head is its token embedding in zoo; a saved lm_head of its own cannot be placed."""
    folder = tmp_path / "peft"
    shutil.copytree(made / "gpt2-embedding" / "adapter", folder)
    edit_config(folder, modules_to_save=["ln_f", "lm_head"])
    edit_weights(
        folder, lambda t: t.update({"base_model.model.lm_head.weight": np.ones((101, 32), np.float32)})
    )
    refused_import(folder, zoo_side / "base-gpt2.safetensors", "lm_head.weight", "tied")


def rewrite_metadata(src: Path, out: Path, change) -> Path:
    with safe_open(str(src), framework="np") as handle:
        metadata = dict(handle.metadata())
    change(metadata)
    save_file(load_file(str(src)), str(out), metadata=metadata)
    return out


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda m: m.update(lora=json.dumps({"ranks": {}, "scales": {}})), ("lora.points is none",)),
        (lambda m: m.update(lora=json.dumps([])), ("a JSON array, not an object",)),
        (
            lambda m: m.update(lora=json.dumps({**json.loads(m["lora"]), "ranks": []})),
            ("lora.ranks is a JSON array, not an object",),
        ),
        (lambda m: m.update(base=json.dumps([1])), ("base", "a JSON array, not an object")),
        (lambda m: m.pop("lora"), ("no 'lora'",)),
    ],
)
def test_merge_of_an_adapter_with_damaged_metadata_is_refused(change, words, zoo_side, tmp_path):
    adapter = rewrite_metadata(zoo_side / "llama-all-linear.safetensors", tmp_path / "a.safetensors", change)
    result = invoke("merge", adapter, "--out", tmp_path / "merged")
    one_line_refusal(result, str(adapter), *words)
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("case", ["gpt2-embedding", "gpt2-bias-rslora"])
def test_the_adapted_twins_weight_table_holds_embedding_and_bias_adapters(case, zoo_side):
    """zoo compare reads the twins through the table ports() builds: each adapter tensor of the
    torch twin (A, B, B's bias; an embedding's) is one the Keras twin holds, equal."""
    from zoo.checkpoint.keras_variables import keras_to_tensors
    from zoo.checkpoint.tensors import model_tensors
    from zoo.lora import load_adapter, read_adapter
    from zoo.lora.adapter import TORCH_PREFIX, ports

    held = read_adapter(zoo_side / f"{case}.safetensors")
    table = ports(held.adapter, held.family.weight_table(held.config), set())
    keras = keras_to_tensors(load_adapter(held.path, "keras"), table)
    torch = {
        k: v for k, v in model_tensors(load_adapter(held.path, "lightning")).items() if TORCH_PREFIX in k
    }
    assert len(torch) == len(held.adapter.tensor_names()) and any(
        k.endswith(("lora_bias", "wte.lora_A")) for k in torch
    )
    for name, value in torch.items():
        np.testing.assert_array_equal(keras[name], value, err_msg=name)


def test_merge_of_a_lora_bias_on_a_projection_without_bias_is_refused(zoo_side, tmp_path):
    """Llama's projections have no bias: B's bias cannot be folded in (PEFT refuses too); the
    adapter itself still runs."""

    def biased(metadata):
        metadata["lora"] = json.dumps({**json.loads(metadata["lora"]), "lora_bias": True})

    source = zoo_side / "llama-all-linear.safetensors"
    tensors = load_file(str(source))
    points = json.loads(safe_open(str(source), framework="np").metadata()["lora"])["points"]
    tensors |= {f"{p}.lora_bias": np.ones(tensors[f"{p}.lora_B"].shape[0], np.float32) for p in points}
    with safe_open(str(source), framework="np") as handle:
        metadata = dict(handle.metadata())
    biased(metadata)
    save_file(tensors, str(tmp_path / "a.safetensors"), metadata=metadata)
    result = invoke("merge", tmp_path / "a.safetensors", "--out", tmp_path / "merged")
    one_line_refusal(result, "has no bias to fold its LoRA bias", "unmerged")
    assert not (tmp_path / "merged").exists()
