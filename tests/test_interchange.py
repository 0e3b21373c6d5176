"""``zoo import`` / ``zoo export`` around a family's format: files, wrappers, refusals.

The layouts of real libraries are tested with their families (tests/test_resnet.py,
tests/test_vit.py). Here a format of our own, on the ``cnn`` family, exercises what
:mod:`zoo.interchange` does whatever the layout: reading every file kind, unwrapping,
refusing what it cannot place, never overwriting, reading every export back.
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import numpy as np
import pytest
from click.testing import CliRunner

from zoo import registry
from zoo.checkpoint.foreign import ForeignFormat, renamed
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tables import tensor_specs
from zoo.cli import main
from zoo.interchange import InterchangeError
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.importing import import_checkpoint

PREFIX = "net."


def to_zoo(tensors, meta):
    """The 'prefixed' layout: zoo's names under ``net.``; config fields in config.json."""
    fields = meta.get("zoo_fields", {"channels": [8, 16], "hidden": 32})
    config = registry.resolve_config("cnn", **fields)
    names = {PREFIX + name: name for name in tensor_specs(registry.get_family("cnn").weight_table(config))}
    return fields, renamed(tensors, names)


def from_zoo(config, tensors):
    fields = {"channels": config.channels, "hidden": config.hidden}
    return {PREFIX + k: v for k, v in tensors.items()}, {"zoo_fields": fields}


PREFIXED = ForeignFormat("prefixed", "zoo's names under net.", f"{__name__}:to_zoo", f"{__name__}:from_zoo")


@pytest.fixture
def with_format(monkeypatch):
    """The registry as it is, with the cnn family reading and writing the prefixed layout."""
    found = dict(registry.families())
    found["cnn"] = dataclasses.replace(found["cnn"], formats=(PREFIXED,))
    monkeypatch.setattr(registry, "families", lambda: found)
    return found["cnn"]


def foreign_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    config = registry.resolve_config("cnn", channels=[8, 16], hidden=32)
    rng = np.random.default_rng(seed)
    return {
        PREFIX + name: (
            rng.normal(size=spec.shape) if spec.dtype == "float32" else np.zeros(spec.shape)
        ).astype(spec.dtype)
        for name, spec in tensor_specs(registry.get_family("cnn").weight_table(config)).items()
    }


def save_torch(path, tensors, wrap=None, prefix=""):
    import torch

    state = {prefix + k: torch.from_numpy(v) for k, v in tensors.items()}
    torch.save({wrap: state, "epoch": 3} if wrap else state, path)


def assert_imported(path, tensors):
    checkpoint = read_checkpoint(path)
    assert checkpoint.framework == "imported"
    assert checkpoint.json("source")["format"] == "prefixed"
    loaded = checkpoint.tensors()
    for name, value in tensors.items():
        assert np.array_equal(loaded[name.removeprefix(PREFIX)], value), name


def test_safetensors_file_imports_and_round_trips_bit_identical(with_format, tmp_path):
    from safetensors.numpy import save_file

    tensors = foreign_tensors()
    save_file(tensors, tmp_path / "w.safetensors")
    done = import_checkpoint(tmp_path / "w.safetensors", tmp_path / "zoo")
    assert done.path == tmp_path / "zoo" / "model.safetensors" and done.format.name == "prefixed"
    assert_imported(done.path, tensors)
    for out in (tmp_path / "back.safetensors", tmp_path / "back.pth", tmp_path / "dir"):
        written = export_checkpoint(done.path, "prefixed", out)
        back = import_checkpoint(written if out.suffix else out, tmp_path / f"again-{out.name}.safetensors")
        assert_imported(back.path, tensors)
    written_meta = json.loads((tmp_path / "dir" / "config.json").read_text())
    assert written_meta == {"zoo_fields": {"channels": [8, 16], "hidden": 32}}


@pytest.mark.parametrize("wrap, prefix", [(None, ""), ("state_dict", ""), ("model", "module.")])
def test_torch_state_dicts_are_unwrapped(with_format, tmp_path, wrap, prefix):
    tensors = foreign_tensors(1)
    save_torch(tmp_path / "w.pth", tensors, wrap, prefix)
    assert_imported(import_checkpoint(tmp_path / "w.pth", tmp_path / "z.safetensors").path, tensors)


def test_directory_with_config_json_gives_the_config(with_format, tmp_path):
    from safetensors.numpy import save_file

    config = registry.resolve_config("cnn", channels=[4, 4], hidden=None)
    specs = tensor_specs(registry.get_family("cnn").weight_table(config))
    tensors = {PREFIX + n: np.ones(s.shape, s.dtype) for n, s in specs.items()}
    (tmp_path / "src").mkdir()
    save_file(tensors, tmp_path / "src" / "model.safetensors")
    meta = {"zoo_fields": {"channels": [4, 4], "hidden": None}}
    (tmp_path / "src" / "config.json").write_text(json.dumps(meta))
    done = import_checkpoint(tmp_path / "src", tmp_path / "z.safetensors")
    assert done.config.channels == [4, 4] and done.config.hidden is None


def test_unknown_layout_names_the_keys_it_could_not_place(with_format, tmp_path):
    from safetensors.numpy import save_file

    tensors = foreign_tensors()
    tensors["classifier.extra"] = np.zeros(3, np.float32)
    save_file(tensors, tmp_path / "w.safetensors")
    with pytest.raises(InterchangeError, match=r"(?s)no registered weight format.*unplaced classifier\."):
        import_checkpoint(tmp_path / "w.safetensors", tmp_path / "z.safetensors")
    assert not (tmp_path / "z.safetensors").exists()


def test_refusals(with_format, tmp_path):
    from safetensors.numpy import save_file

    save_file(foreign_tensors(), tmp_path / "w.safetensors")
    done = import_checkpoint(tmp_path / "w.safetensors", tmp_path / "z.safetensors")
    before = done.path.read_bytes()
    with pytest.raises(InterchangeError, match="already exists; choose another --out or pass --overwrite"):
        import_checkpoint(tmp_path / "w.safetensors", tmp_path / "z.safetensors")
    assert done.path.read_bytes() == before  # nothing saved is lost
    with pytest.raises(InterchangeError, match="already a zoo checkpoint"):
        import_checkpoint(done.path, tmp_path / "y.safetensors")
    with pytest.raises(InterchangeError, match=r"no weight format 'onnx'; known: .*prefixed"):
        import_checkpoint(tmp_path / "w.safetensors", tmp_path / "y.safetensors", format="onnx")
    with pytest.raises(InterchangeError, match="has no weight format 'timm'"):
        export_checkpoint(done.path, "timm", tmp_path / "t.safetensors")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(InterchangeError, match=r"unknown weight file type '\.txt'"):
        import_checkpoint(tmp_path / "notes.txt", tmp_path / "y.safetensors")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InterchangeError, match="a directory without weights"):
        import_checkpoint(tmp_path / "empty", tmp_path / "y.safetensors")


def test_pickled_objects_are_refused_not_executed(with_format, tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("executed",))

    with open(tmp_path / "evil.pt", "wb") as handle:
        pickle.dump({"weights": Payload()}, handle)
    with pytest.raises(InterchangeError, match="does not unpickle"):
        import_checkpoint(tmp_path / "evil.pt", tmp_path / "y.safetensors")


def test_cli_import_and_export(with_format, tmp_path):
    from safetensors.numpy import save_file

    save_file(foreign_tensors(), tmp_path / "w.safetensors")
    runner = CliRunner()
    done = runner.invoke(main, ["import", str(tmp_path / "w.safetensors"), "--out", str(tmp_path / "z")])
    assert done.exit_code == 0, done.output
    assert "convnet" not in done.output and "cnn (prefixed layout" in done.output
    out = runner.invoke(main, ["export", str(tmp_path / "z" / "model.safetensors"), "--format", "prefixed",
                               "--out", str(tmp_path / "e.pth")])  # fmt: skip
    assert out.exit_code == 0 and "read back and checked" in out.output
    again = runner.invoke(main, ["export", str(tmp_path / "z" / "model.safetensors"), "--format", "prefixed",
                                 "--out", str(tmp_path / "e.pth")])  # fmt: skip
    assert again.exit_code == 2 and "already exists" in again.output


def test_preset_mismatch_is_named(with_format, tmp_path):
    from safetensors.numpy import save_file

    save_file(foreign_tensors(), tmp_path / "w.safetensors")
    src, out = tmp_path / "w.safetensors", tmp_path / "y.safetensors"
    with pytest.raises(InterchangeError, match=r"not the preset 'convnet-small': .*hidden is 32, not 128"):
        import_checkpoint(src, out, architecture="convnet-small")
    done = import_checkpoint(src, out, architecture="convnet-tiny")
    assert done.config.preset == "convnet-tiny"
