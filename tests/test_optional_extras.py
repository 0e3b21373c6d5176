"""A missing optional dependency is named with the extra that installs it, before any work:
`pip install 'zoo[export]'` for the ONNX exporters and runtime, `zoo[mlflow]` for MLflow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from zoo.api import create_model
from zoo.backend import save_checkpoint
from zoo.hardware import SetupError
from zoo.recipe import load_recipe
from zoo.tracking import open_tracker

RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"


@pytest.mark.parametrize(
    ("framework", "hidden"), [("lightning", "onnxscript"), ("keras", "tf2onnx"), ("lightning", "onnxruntime")]
)
def test_onnx_export_without_the_export_extra_names_it(tmp_path, monkeypatch, framework, hidden):
    from zoo.cli import main

    checkpoint = save_checkpoint(
        create_model("convnet-tiny", "lightning", seed=0), tmp_path / "ckpt.safetensors"
    )
    monkeypatch.setitem(sys.modules, hidden, None)  # import and find_spec both see it as absent
    out = tmp_path / "model.onnx"
    args = ["export", str(checkpoint), "--format", "onnx", "--framework", framework, "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: zoo export --format onnx --framework {framework} needs {hidden}, not installed here; "
        "pip install 'zoo[export]'"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.safetensors"]


def test_other_formats_do_not_ask_for_the_export_extra(tmp_path, monkeypatch):
    from zoo.deploy import export_model

    checkpoint = save_checkpoint(
        create_model("convnet-tiny", "lightning", seed=0), tmp_path / "ckpt.safetensors"
    )
    for name in ("onnx", "onnxscript", "onnxruntime", "tf2onnx"):
        monkeypatch.setitem(sys.modules, name, None)
    report = export_model(checkpoint, "torch-export", tmp_path / "model.pt2")
    assert report.path.is_file()


def test_mlflow_tracking_without_the_mlflow_extra_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    recipe = load_recipe(RECIPE, ["tracking.mlflow=true", f"export.dir={tmp_path}"])
    with pytest.raises(SetupError) as raised:
        open_tracker(recipe, tmp_path, 100, lambda path: None)
    assert str(raised.value) == (
        "tracking.mlflow needs mlflow, not installed here; pip install 'zoo[mlflow]' "
        "(or set tracking.mlflow false)"
    )
