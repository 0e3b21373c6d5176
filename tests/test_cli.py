"""The ``zoo`` command: fast listing without frameworks, and clean errors (exit 2, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

import zoo
from zoo.cli import main


def run(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


def test_list_imports_neither_torch_nor_tensorflow():
    code = (
        "import sys; from zoo.cli import main\n"
        "try:\n    main(['list'])\nexcept SystemExit:\n    pass\n"
        "print('LOADED', [m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "convnet-small" in out
    assert "LOADED []" in out


def test_validate_and_show_import_no_framework():
    code = (
        "import sys; from zoo.cli import main\n"
        "for args in (['show', 'resnet-8'], ['validate', 'recipes/cnn-digits.yaml']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('LOADED', [m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED []" in out


def test_list_table_and_json():
    code, out = run("list")
    assert code == 0 and out.splitlines()[0].split() == [
        "NAME",
        "FAMILY",
        "VARIANT",
        "KIND",
        "TASKS",
        "PARAMS",
        "FRAMEWORKS",
    ]
    code, out = run("list", "--json")
    entries = {e["name"]: e for e in json.loads(out)}
    assert entries["resnet-8"]["parameters"] == 77754 and entries["resnet-8"]["family"] == "cnn"


def test_list_says_what_a_family_of_several_kinds_builds():
    """The GRU presets sit in the lstm family and resnet-8 (zoo's small residual CNN) in the cnn
    family, not in torchvision's resnet family: the VARIANT column says which net each one is."""
    code, out = run("list")
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines()[1:]}
    assert rows["gru-small"] == ["lstm", "gru", "preset"]
    assert rows["bigru-classifier"] == ["lstm", "bigru", "preset"]
    assert rows["bilstm-classifier"] == ["lstm", "bilstm", "preset"]
    assert rows["resnet-8"] == ["cnn", "resnet-style", "preset"]
    assert rows["convnet-small"] == ["cnn", "convnet", "preset"]
    assert rows["resnet18"] == ["resnet", "-", "preset"]  # a family of one kind: its name says it
    entries = {e["name"]: e for e in json.loads(run("list", "--json")[1])}
    assert entries["gru-small"]["variant"] == "gru" and entries["resnet18"]["variant"] == ""
    code, out = run("show", "gru-small")
    assert code == 0 and "family lstm (gru), input sequence" in out
    assert json.loads(run("show", "resnet-8", "--json")[1])["variant"] == "resnet-style"
    code, out = run("list", "--quiet")
    assert code == 0 and "gru-small" in out.split()  # the old names, unchanged


def test_show_prints_fields_types_values_and_descriptions():
    code, out = run("show", "resnet-8")
    assert code == 0
    line = next(row for row in out.splitlines() if row.startswith("downsample"))
    assert "maxpool|stride|none" in line and '"stride"' in line and "How the map shrinks" in line


def test_show_unknown_name():
    code, out = run("show", "vgg-16")
    assert code == 2 and "error: 'vgg-16' is not a registered architecture or preset" in out


def test_validate_prints_the_resolved_recipe():
    code, out = run("validate", "recipes/cnn-digits.yaml", "--set", "trainer.max_epochs=3")
    assert code == 0 and "max_epochs: 3" in out and "preset: convnet-small" in out


def test_validate_lists_every_error_with_exit_code_2(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("model: {architecture: cnn, channels: [0]}\ntrainer: {precision: fp8}\nextra: 1\n")
    code, out = run("validate", str(recipe))
    assert code == 2
    assert "Traceback" not in out
    assert "model.channels.0: Input should be greater than 0 (got 0)" in out
    assert "trainer.precision: Input should be '32-true', '64-true'" in out
    assert "extra: unknown key" in out


def test_schema_writes_json(tmp_path):
    code, _ = run("schema", "-o", str(tmp_path / "recipe.schema.json"))
    assert code == 0
    assert json.loads((tmp_path / "recipe.schema.json").read_text())["title"] == "Recipe"


def test_schema_into_a_missing_folder_names_it(tmp_path):
    code, out = run("schema", "-o", str(tmp_path / "missing" / "recipe.schema.json"))
    assert code == 2
    assert f"error: {tmp_path / 'missing'}: no such folder; create it first or write elsewhere\n" in out
    assert "Traceback" not in out and not (tmp_path / "missing").exists()


def test_inspect_prints_metadata_and_tensors(tmp_path):
    path = zoo.save_checkpoint(
        zoo.create_model("convnet-tiny", framework="torch"), tmp_path / "m.safetensors"
    )
    code, out = run("inspect", str(path))
    assert code == 0
    assert "architecture: cnn" in out and "framework: lightning" in out
    assert any(row.split()[:3] == ["head.fc.weight", "10x32", "float32"] for row in out.splitlines())


@pytest.mark.parametrize("content", [b"", b"garbage" * 20, b"\x80\x04\x95pickle"])
def test_inspect_bad_files_exit_2_without_traceback(tmp_path, content):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    code, out = run("inspect", str(path))
    assert code == 2 and out.startswith(f"error: {path}:") and "Traceback" not in out


def test_train_with_a_bad_override_exits_2():
    code, out = run("train", "recipes/cnn-digits.yaml", "--set", "trainer.max_epochs=0")
    assert code == 2 and "trainer.max_epochs: Input should be greater than 0" in out
