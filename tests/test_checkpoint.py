"""The common checkpoint: metadata, atomic writes, and exact errors for every bad file."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from safetensors.numpy import save_file

import zoo
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import FORMAT, read_checkpoint
from zoo.checkpoint.writer import write_safetensors


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = zoo.create_model("convnet-tiny", framework="torch")
    path = tmp_path_factory.mktemp("ckpt") / "model.safetensors"
    zoo.save_checkpoint(model, path, metrics={"test_accuracy": 0.5})
    return path


def _rewrite(source, target, edit_tensors=None, edit_metadata=None):
    from safetensors import safe_open

    with safe_open(str(source), framework="np") as handle:
        metadata = dict(handle.metadata())
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    if edit_tensors:
        edit_tensors(tensors)
    if edit_metadata:
        edit_metadata(metadata)
    save_file(tensors, str(target), metadata=metadata)
    return target


def test_metadata_says_what_is_needed_to_reuse_the_model(saved):
    info = zoo.inspect_checkpoint(saved)
    meta = info["metadata"]
    assert meta["format"] == FORMAT and meta["format_version"] == "1"
    assert meta["architecture"] == "cnn" and meta["config"]["preset"] == "convnet-tiny"
    assert meta["framework"] == "lightning" and meta["task"] == "classification"
    assert meta["task_info"] == {"num_classes": 10}
    assert meta["metrics"] == {"test_accuracy": 0.5}
    assert "torch" in meta["versions"]
    assert ("head.fc.weight", (10, 32), "float32") in info["tensors"]


def test_inspect_shows_the_metadata_in_the_written_order(saved, tmp_path):
    """safetensors returns metadata in a different order in every process; inspect (text and
    --json) keeps write_checkpoint's order, and keys zoo does not write go last, alphabetically."""
    from click.testing import CliRunner

    from zoo.checkpoint.metadata import METADATA_ORDER
    from zoo.cli import main

    extra = _rewrite(saved, tmp_path / "extra.safetensors", edit_metadata=lambda m: m.update(zz="1", aa="2"))
    shown = list(zoo.inspect_checkpoint(extra)["metadata"])
    written = [key for key in METADATA_ORDER if key in shown]  # a trained model has no source
    assert written[:4] == ["format", "format_version", "architecture", "config"]
    assert shown == [*written, "aa", "zz"]
    printed = CliRunner().invoke(main, ["inspect", str(extra)])
    assert printed.exit_code == 0, printed.output
    keys = [line.split(":")[0] for line in printed.output.split("\n\n")[0].splitlines()]
    assert keys == [*written, "aa", "zz"]


def test_wrong_architecture_is_named(saved):
    with pytest.raises(CheckpointError, match=r"is a 'cnn' checkpoint, but a 'rnn' model|not a registered"):
        read_checkpoint(saved, architecture="rnn")


def test_missing_and_extra_tensors_are_named(saved, tmp_path):
    def edit(tensors):
        del tensors["head.fc.bias"]
        tensors["head.extra"] = np.zeros(3, np.float32)

    path = _rewrite(saved, tmp_path / "m.safetensors", edit)
    with pytest.raises(
        CheckpointError, match=r"missing tensors: head\.fc\.bias; unexpected tensors: head\.extra"
    ):
        read_checkpoint(path)


def test_shape_and_dtype_mismatches_are_named(saved, tmp_path):
    def edit(tensors):
        tensors["head.fc.weight"] = np.zeros((10, 31), np.float32)
        tensors["head.fc.bias"] = tensors["head.fc.bias"].astype(np.float64)

    path = _rewrite(saved, tmp_path / "m.safetensors", edit)
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    assert "head.fc.weight has shape [10, 31], the config needs [10, 32]" in str(caught.value)
    assert "head.fc.bias has dtype float64, expected float32" in str(caught.value)


def test_a_safetensors_file_without_the_marker_is_refused(saved, tmp_path):
    path = _rewrite(saved, tmp_path / "m.safetensors", edit_metadata=lambda m: m.pop("format"))
    with pytest.raises(CheckpointError, match="a safetensors file, but not a zoo checkpoint"):
        read_checkpoint(path)


def test_an_unknown_architecture_is_refused(saved, tmp_path):
    path = _rewrite(saved, tmp_path / "m.safetensors", edit_metadata=lambda m: m.update(architecture="mlp"))
    with pytest.raises(CheckpointError, match="'mlp' is not a registered architecture or preset"):
        read_checkpoint(path)


def test_a_bad_config_is_refused(saved, tmp_path):
    def edit(meta):
        config = json.loads(meta["config"])
        config["channels"] = [0]
        meta["config"] = json.dumps(config)

    path = _rewrite(saved, tmp_path / "m.safetensors", edit_metadata=edit)
    with pytest.raises(CheckpointError, match="its cnn config does not validate"):
        read_checkpoint(path)


@pytest.mark.parametrize("keep", [0, 7, 100, -1000])
def test_truncated_files_are_refused(saved, tmp_path, keep):
    data = saved.read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[:keep])
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        read_checkpoint(path)


def test_text_files_are_refused(tmp_path):
    path = tmp_path / "notes.safetensors"
    path.write_text("hello, this is not a checkpoint at all\n" * 10)
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        read_checkpoint(path)


def test_pickles_are_never_unpickled(tmp_path):
    marker = tmp_path / "executed"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for name, payload in [("model.pt", pickle.dumps(Evil())), ("model.ckpt", b"PK\x03\x04rest")]:
        path = tmp_path / name
        path.write_bytes(payload)
        with pytest.raises(CheckpointError, match="looks like a pickled PyTorch file"):
            zoo.load_checkpoint(path)
    assert not marker.exists()


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        read_checkpoint(tmp_path / "absent.safetensors")


def test_a_failed_write_leaves_the_previous_file_intact(saved, tmp_path):
    target = tmp_path / "model.safetensors"
    target.write_bytes(saved.read_bytes())
    before = target.read_bytes()
    with pytest.raises(TypeError):  # safetensors metadata must be str -> str
        write_safetensors(target, {"w": np.zeros(3, np.float32)}, {"format": 1})
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_overwriting_a_checkpoint_replaces_it_whole(saved, tmp_path):
    target = tmp_path / "model.safetensors"
    target.write_bytes(saved.read_bytes())
    model = zoo.load_checkpoint(target, framework="torch")  # tensors mapped from the old file
    zoo.save_checkpoint(model, target, metrics={"test_accuracy": 0.75})
    assert zoo.inspect_checkpoint(target)["metadata"]["metrics"] == {"test_accuracy": 0.75}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_low_precision_export_loads_into_both_twins(tmp_path, dtype):
    model = zoo.create_model("convnet-tiny", framework="torch")
    path = zoo.save_checkpoint(model, tmp_path / "low.safetensors", dtype=dtype)
    full = zoo.save_checkpoint(model, tmp_path / "full.safetensors")
    assert path.stat().st_size < 0.6 * full.stat().st_size
    info = zoo.inspect_checkpoint(path)
    assert info["metadata"]["dtype"] == dtype
    x = np.random.default_rng(0).normal(size=(4, 1, 8, 8)).astype(np.float32)
    import torch

    with torch.no_grad():
        reference = model.eval()(torch.from_numpy(x)).numpy()
        low = zoo.load_checkpoint(path, "torch").eval()(torch.from_numpy(x)).numpy()
    keras_low = np.asarray(zoo.load_checkpoint(path, "keras")(x.transpose(0, 2, 3, 1)))
    assert np.abs(low - keras_low).max() <= 1e-5
    assert np.abs(low - reference).max() <= 0.05  # bf16 keeps ~3 significant digits


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("format_version", "abc", "format_version 'abc' is not a number"),
        ("task_info", "{not json", "its task_info metadata is not JSON"),
        ("metrics", "[1,", "its metrics metadata is not JSON"),
    ],
)
def test_damaged_metadata_is_named(saved, tmp_path, key, value, message):
    path = _rewrite(saved, tmp_path / "m.safetensors", edit_metadata=lambda m: m.update({key: value}))
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)


def test_checkpoints_get_the_umask_mode_not_0600(tmp_path):
    import os

    previous = os.umask(0o027)
    try:
        path = write_safetensors(tmp_path / "m.safetensors", {"a": np.zeros(2, np.float32)}, {})
    finally:
        os.umask(previous)
    assert os.stat(path).st_mode & 0o777 == 0o640


def test_temporaries_of_killed_writers_are_cleaned_up_and_live_ones_kept(tmp_path):
    import os
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".m.safetensors.{dead.pid}.tmp"
    live = tmp_path / f".m.safetensors.{os.getppid()}.tmp"
    stale.write_bytes(b"half a file")
    live.write_bytes(b"being written")
    write_safetensors(tmp_path / "m.safetensors", {"a": np.zeros(2, np.float32)}, {})
    assert not stale.exists() and live.exists()
