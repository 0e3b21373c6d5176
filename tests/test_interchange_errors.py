"""``zoo import`` and ``zoo export`` refusals (issues 27, 38): foreign folders zoo accepted wrongly,
or that a command destroyed, are refused now with one line naming the file, tensor, field or
option, and nothing is lost.

- a safetensors index whose ``weight_map`` names a shard outside the folder being imported
  (shards beside the index and huggingface_hub's cache layout import);
- a foreign header that names a tensor twice;
- a damaged config.json, safetensors index or tokenizer_config.json;
- attention weights without a config.json, whose head count zoo guessed from the width;
- an export that rewrote fields of the ``config.json`` it was imported with;
- an import or export whose output is its own input, replaced even by ``--overwrite``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import reference_env
import torch
from cli_helpers import digest, invoke, nested, one_line_refusal, zoo_cli
from safetensors.numpy import load_file, save_file
from test_checkpoint_errors import with_a_name_twice
from test_interchange import foreign_tensors, with_format  # noqa: F401 (with_format: a fixture)

import zoo
from architectures.bert.formats import from_hf as bert_from_hf
from architectures.vit.formats import from_timm
from zoo import registry
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.interchange import InterchangeError
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint


@pytest.fixture(scope="module")
def gpt2_hf(tmp_path_factory) -> Path:
    """A transformers GPT-2 folder (model.safetensors + config.json) that zoo exported."""
    root = tmp_path_factory.mktemp("gpt2")
    model = zoo.create_model("gpt2-micro", framework="lightning", seed=0, vocab_size=50)
    export_checkpoint(zoo.save_checkpoint(model, root / "zoo.safetensors"), "hf", root / "hf")
    return root / "hf"


# ----------------------------------------------------------------------- shards outside the folder


def sharded(folder: Path, source: Path, shards: dict[str, str]) -> Path:
    """``folder`` holding ``source``'s config.json and an index mapping each tensor of
    ``source`` to the shard named by ``shards`` (tensor -> shard; the rest: ``shard-0``)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "config.json", folder / "config.json")
    names = list(load_file(source / "model.safetensors"))
    weight_map = {name: shards.get(name, "shard-0.safetensors") for name in names}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def write_shards(folder: Path, source: Path, split: str) -> None:
    """``source``'s tensors as two shard files in ``folder``, ``split`` alone in the second."""
    tensors = load_file(source / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if k != split}, str(folder / "shard-0.safetensors"))
    save_file({split: tensors[split]}, str(folder / "shard-1.safetensors"))


@pytest.mark.parametrize("where", ["parent", "absolute", "link"])
def test_an_index_naming_a_shard_outside_the_folder_is_refused(gpt2_hf, tmp_path, where):
    outside = tmp_path / "ok" / "model.safetensors"
    outside.parent.mkdir()
    save_file({"transformer.ln_f.weight": np.ones(64, np.float32)}, str(outside))
    split = "transformer.ln_f.weight"
    names = {"parent": "../ok/model.safetensors", "absolute": str(outside), "link": "shard-1.safetensors"}
    shard = names[where]
    folder = sharded(tmp_path / "evil", gpt2_hf, {split: shard})
    write_shards(folder, gpt2_hf, split)
    if where == "link":
        (folder / "shard-1.safetensors").unlink()
        (folder / "shard-1.safetensors").symlink_to(outside)
    code, out = zoo_cli("import", folder, "--out", tmp_path / "zoo")
    assert code == 2 and f"weight_map entry {split!r} names the shard" in out, out
    assert ("a link to" if where == "link" else "not a file name") in out and "\n" not in out.strip(), out
    assert not (tmp_path / "zoo").exists()


def test_shards_beside_the_index_and_the_hugging_face_cache_layout_import(gpt2_hf, tmp_path):
    """A sharded folder imports as the one file did; so does a cache snapshot whose shards are
    links into the ``blobs`` folder two levels up (huggingface_hub's layout)."""
    expected = load_file(import_checkpoint(gpt2_hf, tmp_path / "one").path)
    split = "transformer.ln_f.weight"
    folder = sharded(tmp_path / "shards", gpt2_hf, {split: "shard-1.safetensors"})
    write_shards(folder, gpt2_hf, split)
    snapshot = tmp_path / "models--zoo--gpt2" / "snapshots" / "abc123"
    sharded(snapshot, gpt2_hf, {split: "shard-1.safetensors"})
    (snapshot.parent.parent / "blobs").mkdir()
    for name in ("shard-0.safetensors", "shard-1.safetensors"):
        blob = snapshot.parent.parent / "blobs" / hashlib.sha256(name.encode()).hexdigest()
        shutil.copy(folder / name, blob)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    for source in (folder, snapshot):
        got = load_file(import_checkpoint(source, tmp_path / source.name).path)
        assert got.keys() == expected.keys() and all(np.array_equal(got[k], expected[k]) for k in got)


# ---------------------------------------------------------------------------- a tensor named twice


def test_a_foreign_header_naming_a_tensor_twice_is_refused(gpt2_hf, tmp_path):
    foreign = tmp_path / "hf" / "model.safetensors"
    foreign.parent.mkdir()
    name = with_a_name_twice(gpt2_hf / "model.safetensors", foreign)
    code, out = zoo_cli("import", foreign, "--out", tmp_path / "zoo", "--num-heads", "4")
    assert code == 2 and f"names the tensor {name!r} twice" in out, out


# ------------------------------------------------------------------------------ damaged JSON files


def foreign_folder(root: Path, **files: str) -> Path:
    """A transformers-like folder: the prefixed layout's weights, and ``files`` by name."""
    root.mkdir()
    save_file(foreign_tensors(), root / "model.safetensors")
    for name, text in files.items():
        (root / name.replace("_json", ".json")).write_text(text)
    return root


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "config.json is not JSON (Expecting property name"),
        ("[1, 2]", "config.json is a JSON array, not an object; it should be transformers' config.json"),
        ('{"a": ' + nested(5000) + "}", "config.json nests arrays and objects more than 100 levels deep"),
    ],
)
@pytest.mark.usefixtures("with_format")
def test_a_damaged_config_json_is_named(tmp_path, text, words):
    src = foreign_folder(tmp_path / "src", config_json=text)
    with pytest.raises(InterchangeError, match=r"config\.json") as error:
        import_checkpoint(src, tmp_path / "out")
    assert words in str(error.value)
    one_line_refusal(invoke("import", src, "--out", tmp_path / "cli"), str(src / "config.json"))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "model.safetensors.index.json is not JSON (Expecting property name"),
        ("[1, 2]", "model.safetensors.index.json is a JSON array, not an object"),
        ("{}", "model.safetensors.index.json: has no weight_map"),
        ('{"weight_map": ["model.safetensors"]}', "has a weight_map that is a JSON array"),
        ('{"weight_map": {"net.a": 3}}', "weight_map maps 'net.a' to a JSON number"),
    ],
)
@pytest.mark.usefixtures("with_format")
def test_a_damaged_safetensors_index_is_named(tmp_path, text, words):
    src = foreign_folder(tmp_path / "src", **{"model.safetensors.index_json": text})
    with pytest.raises(InterchangeError) as error:
        import_checkpoint(src, tmp_path / "out")
    assert words in str(error.value), str(error.value)
    assert str(error.value).endswith('{"weight_map": {"tensor name": "shard file name", ...}}')


@pytest.mark.usefixtures("with_format")
def test_an_index_that_names_its_shards_imports(tmp_path):
    index = {"weight_map": {name: "model.safetensors" for name in foreign_tensors()}}
    src = foreign_folder(tmp_path / "src", **{"model.safetensors.index_json": json.dumps(index)})
    assert import_checkpoint(src, tmp_path / "out").tensors == len(index["weight_map"])


@pytest.mark.parametrize(
    ("text", "words"),
    [("{", "tokenizer_config.json is not JSON"), ('["do_lower_case"]', "is a JSON array, not an object")],
)
@pytest.mark.usefixtures("with_format")
def test_a_damaged_tokenizer_config_is_named(tmp_path, text, words):
    vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    src = foreign_folder(tmp_path / "src", tokenizer_config_json=text, **{"vocab.txt": vocab})
    with pytest.raises(InterchangeError) as error:
        import_checkpoint(src, tmp_path / "out")
    assert words in str(error.value) and "or be removed" in str(error.value), str(error.value)
    assert not (tmp_path / "out").exists()  # refused before anything was written


# ------------------------------------------------------------------------ the attention head count


def bert_384_12(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    """A BERT 384 wide with 12 heads of 32 (MiniLM's shape, one block), weights scaled so that
    attention is far from uniform, exported as transformers' weights alone (no config.json)."""
    fields = dict(
        hidden_size=384, num_heads=12, num_layers=1, intermediate_size=64, vocab_size=40, max_len=16
    )
    model = zoo.create_model("bert", framework="lightning", seed=0, **fields)
    rng = np.random.default_rng(0)
    load_tensors(
        model, {k: v + rng.normal(0, 0.3, v.shape).astype(v.dtype) for k, v in model_tensors(model).items()}
    )
    export_checkpoint(zoo.save_checkpoint(model, tmp_path / "zoo.safetensors"), "hf", tmp_path / "hf")
    (tmp_path / "hf" / "config.json").unlink()
    return model.eval(), tmp_path / "hf"


def hidden(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model.eval()(torch.from_numpy(ids)).numpy()


def test_bert_weights_without_a_config_take_the_head_count_given_never_a_guess(tmp_path):
    model, folder = bert_384_12(tmp_path)
    code, out = zoo_cli("import", folder, "--out", tmp_path / "none")
    assert code == 2 and "how many attention heads their width-384 BERT has" in out, out
    assert "pass zoo import --num-heads N" in out and not (tmp_path / "none").exists(), out
    code, out = zoo_cli("import", folder, "--out", tmp_path / "twelve", "--num-heads", "12")
    assert code == 0, out
    ids = model.zoo_config.example_input(2, seed=1)
    imported = zoo.load_checkpoint(tmp_path / "twelve" / "model.safetensors")
    assert imported.zoo_config.num_heads == 12 and np.array_equal(hidden(imported, ids), hidden(model, ids))
    fields, tensors = bert_from_hf(*read_foreign(folder), num_heads=6)  # what width / 64 gave
    six = registry.get_family("bert").build_torch(registry.resolve_config("bert", **fields))
    load_tensors(six, tensors)
    assert np.max(np.abs(hidden(six, ids) - hidden(model, ids))) > 0.1  # the count changes the outputs


def test_a_head_count_that_contradicts_the_config_json_is_refused(gpt2_hf, tmp_path):
    code, out = zoo_cli("import", gpt2_hf, "--out", tmp_path / "z", "--num-heads", "2")
    assert code == 2 and "--num-heads 2 disagrees with config.json's n_head 4" in out, out
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(gpt2_hf / "model.safetensors", bare / "model.safetensors")
    code, out = zoo_cli("import", bare, "--out", tmp_path / "z")
    assert code == 2 and "their width-64 GPT-2 has" in out and "--num-heads" in out, out
    code, out = zoo_cli("import", bare, "--out", tmp_path / "z", "--num-heads", "4")
    assert code == 0 and read_checkpoint(tmp_path / "z" / "model.safetensors").config.n_head == 4, out
    code, out = zoo_cli(
        "import", bare, "--out", tmp_path / "r", "--num-heads", "4", "--format", "torchvision"
    )
    assert code == 2 and "has no attention heads to count (--num-heads)" in out, out


def test_a_vit_imported_with_its_head_count_exports_it_to_timm(tmp_path):
    """384 wide, 12 heads (timm's vit_small has 6 at this width): the count given at import is
    the count timm's config.json gets on export."""
    fields = dict(image_size=16, patch_size=4, dim=384, num_heads=12, depth=1, mlp_ratio=0.25, num_classes=3)
    model = zoo.create_model("vit", framework="lightning", seed=0, **fields)
    export_checkpoint(zoo.save_checkpoint(model, tmp_path / "zoo.safetensors"), "timm", tmp_path / "timm")
    (tmp_path / "timm" / "config.json").unlink()
    code, out = zoo_cli("import", tmp_path / "timm", "--out", tmp_path / "guess")
    assert code == 2 and "their width-384 ViT has" in out and "--num-heads" in out, out
    code, out = zoo_cli("import", tmp_path / "timm", "--out", tmp_path / "z", "--num-heads", "12")
    assert code == 0, out
    code, out = zoo_cli(
        "export", tmp_path / "z" / "model.safetensors", "--format", "timm", "--out", tmp_path / "back"
    )
    assert code == 0, out
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    assert from_timm(load_file(tmp_path / "back" / "model.safetensors"), written)[0]["num_heads"] == 12
    assert (
        written["model_args"].get("num_heads", 12) == 12
        and written["architecture"] != "vit_small_patch16_224"
    )


# ----------------------------------------------------------------- config.json fields written back


LABELS = {"0": "negative", "1": "neutral", "2": "positive"}
WRITTEN_BACK = {  # family: (reference script and case, config.json fields set, an activation refused)
    "gpt2": (
        ("hf_gpt2.py", "tiny"),
        dict(activation_function="gelu_pytorch_tanh", bos_token_id=7, eos_token_id=9,
             task_specific_params={"text-generation": {"max_length": 20}}),
        ("activation_function", "relu", "activation_function 'relu'"),
    ),
    "bert": (
        ("hf_bert.py", "cls"),
        dict(id2label=LABELS, label2id={v: int(k) for k, v in LABELS.items()}, pad_token_id=1,
             problem_type="single_label_classification", tokenizer_class="BertTokenizer"),
        ("hidden_act", "gelu_new", "hidden_act is 'gelu_new'"),
    ),
}  # fmt: skip


def edited(folder: Path, out: Path, **fields) -> dict:
    """A copy of a transformers folder whose config.json has ``fields`` changed."""
    shutil.copytree(folder, out)
    config = json.loads((folder / "config.json").read_text()) | fields
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return config


@pytest.mark.parametrize("family", list(WRITTEN_BACK))
def test_an_export_writes_back_the_config_fields_it_was_imported_with(tmp_path, family):
    """transformers' own config.json (GPT-2's activation named gelu_pytorch_tanh, its bos/eos
    ids, BERT's label names...) through zoo import and zoo export --format hf: every field as
    it was. An activation the family does not compute is refused at import, by name."""
    (script, case), fields, (key, activation, refused) = WRITTEN_BACK[family]
    reference = reference_env.fixtures(script) / case
    source = edited(reference, tmp_path / "src", **fields)
    import_checkpoint(tmp_path / "src", tmp_path / "zoo")
    export_checkpoint(tmp_path / "zoo" / "model.safetensors", "hf", tmp_path / "back")
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    assert {name: written.get(name) for name in source} == source
    edited(reference, tmp_path / "other", **{key: activation})
    code, out = zoo_cli("import", tmp_path / "other", "--out", tmp_path / "refused")
    assert code == 2 and refused in out and not (tmp_path / "refused").exists(), out


# --------------------------------------------------------------------- an output that is the input


def test_an_export_onto_its_own_checkpoint_is_refused_and_the_checkpoint_kept(gpt2_hf, tmp_path):
    own = tmp_path / "run" / "model.safetensors"
    own.parent.mkdir()
    shutil.copy(gpt2_hf.parent / "zoo.safetensors", own)
    (tmp_path / "link.safetensors").symlink_to(own)
    before = digest(own)
    attempts = (
        (["--format", "hf", "--out", own], f"--out: {own} is an input of this command"),
        (["--format", "hf", "--out", own.parent], f"--out: {own} is an input of this command"),
        (["--format", "hf", "--out", tmp_path / "link.safetensors"], f"resolves to {own}, an input"),
        (["--format", "savedmodel", "--out", own.parent], f"--out: {own.parent} holds {own}, an input"),
    )
    for options, said in attempts:
        code, out = zoo_cli("export", own, *options, "--overwrite")
        assert code == 2 and said in out and "choose another --out" in out, (options, out)
        assert digest(own) == before and sorted(p.name for p in own.parent.iterdir()) == ["model.safetensors"]
    code, out = zoo_cli("inspect", own)
    assert code == 0, out


def test_an_import_into_the_folder_it_reads_is_refused(gpt2_hf, tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(gpt2_hf, folder)
    before = {p.name: digest(p) for p in folder.iterdir()}
    (folder / "tokenizer.json").write_text("{}")  # would be replaced by the imported tokenizer
    for out, replaced in ((folder, "model.safetensors"), (folder / "zoo.safetensors", "tokenizer.json")):
        code, said = zoo_cli("import", folder, "--out", out, "--overwrite")
        assert code == 2 and f"--out: {folder / replaced} is an input of this command" in said, said
    (folder / "tokenizer.json").unlink()
    assert {p.name: digest(p) for p in folder.iterdir()} == before
