"""Deployment exports (zoo.deploy): every family's smallest preset to ONNX from both twins, to a
SavedModel and to a torch.export program, each export run by its own runtime.

``export_model`` checks every export itself (several batch sizes and lengths, padded rows);
these tests also load each artifact the way a user would, outside zoo.deploy, and run it on a
batch of yet another shape against the training model. Families are read from the registry.
Recurrent nets export to torch.export too: their layers are traced as scans
(zoo.nn.torch.recurrent_scan) so the steps axis stays dynamic; tests/test_recurrent_scan.py
checks the scans themselves.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import BUILD_LIMIT

from zoo import registry
from zoo.api import create_model
from zoo.backend import load_checkpoint, save_checkpoint
from zoo.checkpoint.metadata import read_checkpoint
from zoo.deploy import ExportError, export_model, inputs
from zoo.deploy.check import RELATIVE
from zoo.keras.data import keras_layout
from zoo.nn.recurrent_config import RecurrentConfig

FORMATS = [("onnx", "lightning"), ("onnx", "keras"), ("savedmodel", "keras"), ("torch-export", "lightning")]
SUFFIX = {"onnx": ".onnx", "savedmodel": "", "torch-export": ".pt2"}


ENTRIES = registry.list_architectures()


def smallest(family: str) -> str:
    """The family's preset with the fewest parameters (the family itself without presets)."""
    entries = [e for e in ENTRIES if e.family == family]
    presets = [e for e in entries if e.kind == "preset"] or entries
    return min(presets, key=lambda e: e.parameters).name


SMALLEST = [smallest(family) for family in registry.families()]
PARAMETERS = {e.name: e.parameters for e in ENTRIES}
CHEAPEST = min(SMALLEST, key=PARAMETERS.__getitem__)


def recurrent_variants() -> list:
    """Padded recurrent nets beyond the smallest presets: each direction setting and cell type
    the config offers (bidirectional LSTM and GRU pack their padded batches in torch)."""
    found = []
    for name in SMALLEST:
        fields = type(registry.resolve_config(name)).model_fields
        if "bidirectional" not in fields:
            continue
        cells = fields["cell"].annotation.__args__ if "cell" in fields else (None,)
        for cell in cells:
            overrides = {"bidirectional": True} | ({"cell": cell} if cell else {})
            found.append(
                pytest.param(name, overrides, id="-".join([name, "bidirectional", *filter(None, [cell])]))
            )
    return found


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name (and overrides) -> a checkpoint of seeded weights, written once per module."""
    root = tmp_path_factory.mktemp("deploy-checkpoints")
    made: dict[str, os.PathLike] = {}

    def get(name: str, **overrides):
        key = name + "".join(f"-{k}={v}" for k, v in sorted(overrides.items()))
        if key not in made:
            made[key] = save_checkpoint(
                create_model(name, "lightning", seed=0, **overrides), root / f"{key}.safetensors"
            )
        return made[key]

    return get


def run_artifact(path, format: str, framework: str, ports, batch: dict[str, np.ndarray]) -> np.ndarray:
    """The artifact loaded as its users load it: onnxruntime, tf.saved_model, torch.export.load."""
    feed = {
        p.name: keras_layout(batch[p.name], "image")
        if framework == "keras" and p.name == "images"
        else batch[p.name]
        for p in ports
    }
    if format == "onnx":
        import onnxruntime

        return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    if format == "savedmodel":
        import tensorflow as tf

        serve = tf.saved_model.load(str(path)).signatures["serving_default"]
        (out,) = serve(**{k: tf.constant(v) for k, v in feed.items()}).values()
        return out.numpy()
    program = torch.export.load(str(path)).module()
    first, *rest = (torch.from_numpy(feed[p.name]) for p in ports)
    with torch.no_grad():
        return program(first, **{p.name: t for p, t in zip(ports[1:], rest, strict=True)}).numpy()


def run_training_model(checkpoint, framework: str, ports, batch: dict[str, np.ndarray]) -> np.ndarray:
    model = load_checkpoint(checkpoint, framework)
    first, *rest = (batch[p.name] for p in ports)
    named = {p.name: v for p, v in zip(ports[1:], rest, strict=True)}
    if framework == "keras":
        return np.asarray(
            model(keras_layout(first, "image" if ports[0].name == "images" else "seq"), **named)
        )
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(first), **{k: torch.from_numpy(v) for k, v in named.items()}).numpy()


def check_export(checkpoint, format: str, framework: str, out) -> None:
    """Export, then run the artifact on a batch of a shape the export's own check did not use."""
    family, config = read_checkpoint(checkpoint).family, read_checkpoint(checkpoint).config
    context = config.context_length()
    report = export_model(checkpoint, format, out, framework=framework)
    assert out.exists() and report.path == out
    assert [p.name for p in report.inputs] == [p.name for p in inputs.input_ports(family, config)]
    assert len({c.batch for c in report.checks}) >= 2
    if inputs.has_steps(report.inputs):
        assert len({c.steps for c in report.checks}) >= 2 or (context is not None and context < 11)
    assert all(c.max_diff <= c.tolerance for c in report.checks)
    steps = min(6, context or 6)
    batch = inputs.batch(config, report.inputs, 5, steps, seed=99)
    if "padding_mask" in batch:
        assert batch["padding_mask"].any()
    got = run_artifact(out, format, framework, report.inputs, batch)
    expected = run_training_model(checkpoint, framework, report.inputs, batch)
    assert got.shape == expected.shape
    assert np.max(np.abs(got - expected)) <= RELATIVE * max(1.0, float(np.max(np.abs(expected))))


def smallest_cases() -> list:
    """Every format of every family's smallest preset. Keras' ONNX export of a preset over
    conftest.BUILD_LIMIT parameters is heavy: tf2onnx took one process to 16.7 GB on gemma-micro
    (16.9M parameters, 16.8M of them its 262,144-token embedding), where torch's ONNX export of it
    took 1.0 GB; beside the other pytest worker that left the machine to the OOM killer."""

    def marks(name: str, format: str, framework: str) -> list:
        tf2onnx = (format, framework) == ("onnx", "keras")
        return [pytest.mark.heavy] if tf2onnx and PARAMETERS[name] > BUILD_LIMIT else []

    return [
        pytest.param(
            name, format, framework, id=f"{name}-{format}-{framework}", marks=marks(name, format, framework)
        )
        for name in SMALLEST
        for format, framework in FORMATS
    ]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("name", "format", "framework"), smallest_cases())
def test_smallest_preset_exports_and_runs(name, format, framework, checkpoints, tmp_path):
    out = tmp_path / "exports" / f"{name}{SUFFIX[format]}"
    out.parent.mkdir()
    check_export(checkpoints(name), format, framework, out)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("format", "framework"), FORMATS, ids=[f"{f}-{w}" for f, w in FORMATS])
@pytest.mark.parametrize(("name", "overrides"), recurrent_variants())
def test_padded_recurrent_variants_export(name, overrides, format, framework, checkpoints, tmp_path):
    out = tmp_path / "exports" / f"{name}{SUFFIX[format]}"
    out.parent.mkdir()
    check_export(checkpoints(name, **overrides), format, framework, out)


RECURRENT_PRESETS = [
    e.name
    for e in ENTRIES
    if e.kind == "preset" and isinstance(registry.resolve_config(e.name), RecurrentConfig)
]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", RECURRENT_PRESETS)
def test_every_recurrent_preset_exports_to_torch_export(name, checkpoints, tmp_path):
    """Full-width recurrent presets too (up to lstm-medium-lm's two 650-unit layers): the scans'
    float32 roundings grow with the width and stay within the tolerance."""
    out = tmp_path / "exports" / f"{name}.pt2"
    out.parent.mkdir()
    check_export(checkpoints(name), "torch-export", "lightning", out)


def test_an_export_that_disagrees_leaves_nothing(checkpoints, tmp_path, monkeypatch):
    """A reference that differs by 1e-3 (a wrong export, seen from the other side) is refused;
    neither the target nor the temporary file is left."""
    from zoo.deploy import torch_twin

    reference = torch_twin.reference
    monkeypatch.setattr(torch_twin, "reference", lambda *a: lambda x: reference(*a)(x) + 1e-3)
    out = tmp_path / "model.onnx"
    with pytest.raises(ExportError, match=r"disagrees with the training model.*max \|diff\| 0.001"):
        export_model(checkpoints(CHEAPEST), "onnx", out, framework="lightning")
    assert list(tmp_path.iterdir()) == []


def test_refusals_name_what_would_work(checkpoints, tmp_path):
    checkpoint = checkpoints(CHEAPEST)
    with pytest.raises(ExportError, match="made from the keras twin"):
        export_model(checkpoint, "savedmodel", tmp_path / "saved", framework="lightning")
    with pytest.raises(ExportError, match=r"one \.pt2 file"):
        export_model(checkpoint, "torch-export", tmp_path / "model.onnx")
    with pytest.raises(ExportError, match="choose one of: onnx, savedmodel, torch-export"):
        export_model(checkpoint, "tflite", tmp_path / "model.tflite")
    existing = tmp_path / "model.onnx"
    existing.write_text("keep me")
    with pytest.raises(ExportError, match="already exists"):
        export_model(checkpoint, "onnx", existing)
    assert existing.read_text() == "keep me"


def test_cli_export_formats(checkpoints, tmp_path):
    from zoo.cli import main

    checkpoint = str(checkpoints(CHEAPEST))
    out = tmp_path / "model.onnx"
    result = CliRunner().invoke(main, ["export", checkpoint, "--format", "onnx", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "max |diff|" in result.output and "inputs:" in result.output
    refused = CliRunner().invoke(
        main,
        [
            "export",
            checkpoint,
            "--format",
            "savedmodel",
            "--framework",
            "torch",
            "--out",
            str(tmp_path / "s"),
        ],
    )
    assert refused.exit_code == 2 and "keras twin" in refused.output
