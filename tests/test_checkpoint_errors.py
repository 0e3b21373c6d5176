"""Checkpoint files zoo accepted wrongly (issues 27, 38): each is refused now with one line naming
the file, tensor or field, and nothing is lost.

- a safetensors header that names a tensor, a metadata key or an entry field twice;
- metadata whose task (or class count) contradicts the config the model is built from;
- integer or bool weights (metadata ``dtype`` int64/bool), which zoo fine-tuned from;
- finite weights whose test loss overflows, which ``zoo evaluate`` reported as a result;
- metadata naming another family than its config, a config that does not validate, a dtype zoo
  does not write;
- metadata JSON that is damaged, nested too deep or too long (zoo.limits), refused in one line,
  while ``zoo inspect`` shows JSON past the limits as text.

Foreign files (``zoo import``) have theirs in test_interchange_errors.py.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import invoke, nested, one_line_refusal, zoo_cli
from conftest import RECIPE
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import zoo
from zoo.checkpoint.file import CheckpointError, parse_header
from zoo.checkpoint.metadata import read_checkpoint
from zoo.limits import MAX_DEPTH


def rewritten(path: Path, out: Path, tensors=None, **metadata: str) -> Path:
    """A copy of the checkpoint at ``path`` with other tensors or metadata fields."""
    with safe_open(str(path), framework="np") as handle:
        kept = dict(handle.metadata())
    save_file(load_file(path) if tensors is None else tensors, str(out), metadata={**kept, **metadata})
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """An untrained convnet-tiny (it fits cnn-digits.yaml's data), written as zoo writes it."""
    model = zoo.create_model("convnet-tiny", framework="lightning", seed=0)
    return zoo.save_checkpoint(model, tmp_path_factory.mktemp("ckpt") / "model.safetensors")


# ---------------------------------------------------------------------------- a tensor named twice


def with_a_name_twice(path: Path, out: Path) -> str:
    """``path`` with its last tensor's header entry written a second time; the name repeated."""
    data = path.read_bytes()
    end = 8 + struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:end])
    name, entry = list(header.items())[-1]
    text = json.dumps(header)[:-1] + f", {json.dumps(name)}: {json.dumps(entry)}}}"
    text += " " * (-len(text) % 8)
    out.write_bytes(struct.pack("<Q", len(text)) + text.encode() + data[end:])
    return name


def test_a_header_naming_a_tensor_twice_is_refused(checkpoint, tmp_path):
    damaged = tmp_path / "twice.safetensors"
    name = with_a_name_twice(checkpoint, damaged)
    assert name in load_file(damaged)  # safetensors reads it, keeping one of the two
    for command in (["inspect", damaged], ["evaluate", damaged, "--recipe", RECIPE]):
        code, out = zoo_cli(*command)
        assert code == 2 and f"names the tensor {name!r} twice; the file is damaged" in out, out


def test_a_metadata_key_or_an_entry_field_named_twice_is_refused():
    entry = '"dtype": "F32", "shape": [2], "data_offsets": [0, 8]'
    with pytest.raises(CheckpointError, match=r"names the metadata key 'task' twice"):
        parse_header(f'{{"__metadata__": {{"task": "a", "task": "b"}}, "w": {{{entry}}}}}'.encode(), "f")
    with pytest.raises(CheckpointError, match=r"names the 'w' field 'dtype' twice"):
        parse_header(f'{{"w": {{{entry}, "dtype": "I64"}}}}'.encode(), "f")
    assert parse_header(f'{{"w": {{{entry}}}}}'.encode(), "f") == {"w": json.loads(f"{{{entry}}}")}


# ---------------------------------------------------------------- metadata that contradicts itself


def test_a_task_the_config_does_not_build_is_refused_naming_both(checkpoint, tmp_path):
    lm = rewritten(checkpoint, tmp_path / "lm.safetensors", task="language_modeling")
    for command in (["inspect", lm], ["evaluate", lm, "--recipe", RECIPE]):
        code, out = zoo_cli(*command)
        assert code == 2 and "its task metadata is 'language_modeling' but its cnn config builds a " in out, (
            out
        )
        assert "'classification' model; the file is damaged" in out, out
    five = rewritten(checkpoint, tmp_path / "five.safetensors", task_info='{"num_classes": 5}')
    code, out = zoo_cli("inspect", five)
    assert code == 2 and "task_info.num_classes is 5, the config's num_classes 10" in out, out


# --------------------------------------------------------------------------------- integer weights


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_integer_or_bool_weights_are_refused_naming_the_tensor_and_the_dtype(checkpoint, tmp_path, dtype):
    tensors = {k: v.astype(dtype) for k, v in load_file(checkpoint).items()}
    bad = rewritten(checkpoint, tmp_path / f"{dtype}.safetensors", tensors, dtype=dtype)
    commands = (
        ["inspect", bad], ["evaluate", bad, "--recipe", RECIPE],
        ["finetune", RECIPE, "--from", bad, "--set", f"export.dir={tmp_path}"],
        ["export", bad, "--format", "onnx", "--out", tmp_path / "m.onnx"],
    )  # fmt: skip
    for command in commands:
        code, out = zoo_cli(*command)
        assert code == 2 and f"stem.conv.weight has dtype {dtype}, expected float32" in out, (command, out)
    assert not (tmp_path / "m.onnx").exists() and not list(tmp_path.glob("cnn-digits*"))


def test_integer_counters_of_the_weight_table_stay_accepted(tmp_path):
    """BatchNorm's num_batches_tracked is int64 in the table, and in a bfloat16 export too."""
    model = zoo.create_model("convnet-tiny", framework="lightning", seed=0, batch_norm=True)
    path = zoo.save_checkpoint(model, tmp_path / "bn.safetensors", dtype="bfloat16")
    found = read_checkpoint(path)
    counters = {k: v for k, v in found.tensors().items() if k.endswith("num_batches_tracked")}
    assert counters and all(v.dtype == np.int64 for v in counters.values())


# ------------------------------------------------------------- finite weights, outputs overflowing


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_an_evaluation_whose_loss_overflows_fails_naming_it(checkpoint, tmp_path, framework):
    huge = {k: np.full_like(v, 3e38) for k, v in load_file(checkpoint).items()}
    path = rewritten(checkpoint, tmp_path / "huge.safetensors", huge)
    code, out = zoo_cli("evaluate", path, "--recipe", RECIPE, "--framework", framework)
    assert code == 1 and "the test loss is nan: the model's outputs overflow float32" in out, out
    assert "although every weight is finite (the largest: " in out and "3e+38" in out, out
    code, out = zoo_cli("evaluate", checkpoint, "--recipe", RECIPE, "--framework", framework)
    assert code == 0 and "test_loss" in out, out  # the same model at its own scale evaluates


# --------------------------------------- metadata of another family, a dtype of garbage (issue 38)


@pytest.fixture(scope="module")
def gpt2_checkpoint(tmp_path_factory) -> Path:
    model = zoo.create_model("gpt2-micro", framework="lightning", seed=0, vocab_size=50)
    return zoo.save_checkpoint(model, tmp_path_factory.mktemp("gpt2ckpt") / "model.safetensors")


def test_an_architecture_naming_another_family_than_its_config_is_one_line(gpt2_checkpoint, tmp_path):
    """It printed pydantic's 13 errors, each with its documentation URL."""
    bad = rewritten(gpt2_checkpoint, tmp_path / "resnet.safetensors", architecture="resnet")
    code, out = zoo_cli("inspect", bad)
    assert code == 2 and out.strip() == (
        f"error: {bad}: its architecture metadata is 'resnet' but its config metadata is a 'gpt2' config; "
        "the file is damaged (its metadata contradicts itself)"
    ), out


def test_a_config_field_that_does_not_validate_is_one_line_naming_the_field(gpt2_checkpoint, tmp_path):
    config = json.loads(read_checkpoint(gpt2_checkpoint).metadata["config"])
    fields = json.dumps({**config, "n_embd": "wide", "n_head": -1})
    bad = rewritten(gpt2_checkpoint, tmp_path / "fields.safetensors", config=fields)
    code, out = zoo_cli("inspect", bad)
    assert code == 2 and len(out.strip().splitlines()) == 1 and "errors.pydantic.dev" not in out, out
    assert f"error: {bad}: its gpt2 config does not validate: config.n_embd: " in out, out
    assert (
        "; config.n_head: Input should be greater than or equal to 1; its config metadata is damaged" in out
    )


@pytest.mark.parametrize("dtype", ["garbage", "float8", ""])
def test_a_dtype_zoo_does_not_write_is_refused_naming_the_field(gpt2_checkpoint, tmp_path, dtype):
    """``zoo inspect`` showed it as the checkpoint's dtype, and exports wrote it on."""
    bad = rewritten(gpt2_checkpoint, tmp_path / "dtype.safetensors", dtype=dtype)
    for command in (["inspect", bad], ["inspect", bad, "--json"]):
        code, out = zoo_cli(*command)
        assert code == 2 and out.strip() == (
            f"error: {bad}: its dtype metadata {dtype!r} is not a weight dtype zoo writes (one of float32, "
            "bfloat16, float16, float64); its weights are float32, so the file is damaged: export it again, "
            "or write dtype=float32 in its metadata"
        ), out
    with pytest.raises(CheckpointError, match="its dtype metadata"):
        zoo.load(bad)


# ------------------------------------------------------------------- metadata JSON past the limits


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("parsers") / "model.safetensors"
    return zoo.save_checkpoint(zoo.create_model("convnet-tiny", framework="torch"), path)


def with_metadata(saved: Path, target: Path, **changes: str) -> Path:
    from safetensors import safe_open

    with safe_open(str(saved), framework="np") as handle:
        metadata = {**handle.metadata(), **changes}
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    save_file(tensors, str(target), metadata=metadata)
    return target


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("format_version", "²", "format_version '²' is not a number zoo writes (1 to 9 digits 0-9)"),
        ("format_version", "1" * 5000, "format_version '11111111111111111111111 is not a number zoo writes"),
        ("format_version", "٣", "format_version '٣' is not a number"),
        ("task_info", '{"vocab": ' + nested(5000, '"a"') + "}", "its task_info metadata nests arrays"),
        (
            "recipe",
            '{"data": ' + nested(MAX_DEPTH) + "}",
            "its recipe metadata nests arrays and objects more",
        ),
        ("metrics", "1" * 5000, "its metrics metadata is not JSON zoo reads"),
        ("task_info", "[1,2]", "its task_info metadata is a JSON array, not an object; the file is damaged"),
    ],
)
def test_damaged_checkpoint_metadata_is_refused_in_one_line(saved, tmp_path, key, value, words):
    path = with_metadata(saved, tmp_path / "m.safetensors", **{key: value})
    with pytest.raises(CheckpointError) as error:
        read_checkpoint(path)
    assert words in str(error.value) and "\n" not in str(error.value), str(error.value)
    one_line_refusal(invoke("inspect", path), str(path), key)


def test_checkpoint_metadata_at_the_depth_limit_reads(saved, tmp_path):
    recipe = '{"data": ' + nested(MAX_DEPTH - 1) + "}"  # the object is the first level
    path = with_metadata(saved, tmp_path / "m.safetensors", recipe=recipe)
    assert read_checkpoint(path).json("recipe")["data"][0]


def test_inspect_shows_json_past_the_limits_as_text(saved, tmp_path):
    path = with_metadata(saved, tmp_path / "m.safetensors", notes=nested(5000), extra='{"a": [1]}')
    metadata = zoo.inspect_checkpoint(path)["metadata"]
    assert metadata["notes"] == nested(5000) and metadata["extra"] == {"a": [1]}
