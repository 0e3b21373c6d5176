"""Exports for deployment: a zoo checkpoint as a model that runs without zoo.

Formats (one module each):

- ``onnx`` from the torch twin (:mod:`zoo.deploy.onnx_torch`) or the Keras twin
  (:mod:`zoo.deploy.onnx_keras`), run by onnxruntime;
- ``savedmodel``: a TensorFlow SavedModel of the Keras twin (:mod:`zoo.deploy.savedmodel`);
- ``torch-export``: a ``torch.export`` program of the torch twin (:mod:`zoo.deploy.torch_program`).

Inputs are named and laid out as :mod:`zoo.deploy.inputs` says. Every export is run before it
is kept (:mod:`zoo.deploy.check`): the same batches, at several batch sizes and sequence
lengths with padded rows, through the artifact's runtime and through the training model it
came from; an export that does not load or disagrees is an error and leaves no file.
Weight layouts of other libraries (torchvision, timm, transformers) are
:mod:`zoo.interchange`'s ``zoo export`` formats, not these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zoo.backend import load_checkpoint
from zoo.checkpoint.metadata import read_checkpoint
from zoo.deploy import onnx_runtime, onnx_torch, torch_program, torch_twin
from zoo.deploy.check import Check, ExportError, run_checks, staged
from zoo.deploy.inputs import InputPort, batch, input_ports, shapes
from zoo.hardware import require_extra
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.progress import track
from zoo.recipe import normalize_framework

FORMATS = ("onnx", "savedmodel", "torch-export")
# The twin each format is made from; ONNX comes from either.
TWINS = {"onnx": ("lightning", "keras"), "savedmodel": ("keras",), "torch-export": ("lightning",)}
SUFFIXES = {"onnx": ".onnx", "savedmodel": "", "torch-export": ".pt2"}
# The `zoo[export]` packages an ONNX export needs, by twin: its exporter, and the runtime that checks
# the file (torch's TorchScript exporter would run without onnxscript, but only as the fallback).
EXTRA_MODULES = {
    "onnx": {"lightning": ("onnx", "onnxscript", "onnxruntime"), "keras": ("onnx", "tf2onnx", "onnxruntime")}
}
SEED = 0

__all__ = ["FORMATS", "ExportError", "ExportReport", "export_model"]


@dataclass(frozen=True)
class ExportReport:
    """What was written and how well it agrees with the training model."""

    path: Path
    format: str
    framework: str
    exporter: str
    inputs: list[InputPort]
    checks: list[Check] = field(default_factory=list)

    @property
    def max_diff(self) -> float:
        return max(c.max_diff for c in self.checks)

    def summary(self) -> str:
        inputs = "; ".join(port.describe(self.framework) for port in self.inputs)
        checked = ", ".join(f"{c.batch}x{c.steps}" if c.steps else str(c.batch) for c in self.checks)
        return (
            f"{self.path}: {self.format} from the {self.framework} twin by {self.exporter}\n"
            f"  inputs: {inputs}\n"
            f"  checked at {checked} (batch x steps): max |diff| {self.max_diff:.3g} "
            "against the training model"
        )


def export_model(
    checkpoint: str | Path,
    format: str,
    out: str | Path,
    *,
    framework: str | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """A zoo checkpoint -> a deployable ``format`` at ``out``, run and checked before it is kept.

    ``framework`` picks the twin an ONNX file is made from (``lightning`` or ``keras``; default:
    the framework that wrote the checkpoint, ``lightning`` for an imported one). SavedModel is
    the Keras twin's and torch.export the torch twin's; naming the other twin is an error.
    """
    if format not in FORMATS:
        raise ExportError(f"unknown deployment format {format!r}; choose one of: {', '.join(FORMATS)}")
    ckpt = read_checkpoint(checkpoint)
    framework = _framework(format, framework, ckpt.framework)
    if format in EXTRA_MODULES:
        require_extra(
            "export",
            EXTRA_MODULES[format][framework],
            f"zoo export --format {format} --framework {framework}",
        )
    out = Path(out)
    refuse_inputs_as_outputs([out], [ckpt.path], ExportError)  # a SavedModel replaces its whole folder
    if SUFFIXES[format] and out.suffix != SUFFIXES[format]:
        raise ExportError(f"{out}: a {format} export is one {SUFFIXES[format]} file; name --out so")
    family, config = ckpt.family, ckpt.config
    ports = input_ports(family, config)
    checks, trace = shapes(config, ports)
    example = batch(config, ports, *trace, seed=SEED)
    batches = [(size, steps, batch(config, ports, size, steps, SEED + i + 1)) for i, (size, steps) in
               enumerate(checks)]  # fmt: skip
    model = load_checkpoint(checkpoint, framework)
    what = f"{checkpoint} -> {format} ({framework} twin)"
    with staged(out, overwrite) as temporary:
        exporter, artifact, reference = _export(format, framework, model, ports, example, config, temporary)
        checking = track(batches, f"checking the {format} export", unit="batch")
        results = run_checks(checking, artifact(), reference, what)  # type: ignore[arg-type]
    return ExportReport(out, format, framework, exporter, ports, results)


def _framework(format: str, asked: str | None, written_by: str) -> str:
    twins = TWINS[format]
    if asked is None:
        written_by = normalize_framework(written_by) if written_by else ""
        return written_by if written_by in twins else twins[0]
    framework = normalize_framework(asked)
    if framework not in twins:
        raise ExportError(
            f"a {format} export is made from the {' or '.join(twins)} twin, not {asked!r}; "
            + ("use --format onnx for an ONNX file of that twin" if format != "onnx" else "")
        )
    return framework


def _export(format: str, framework: str, model, ports, example, config, path: Path):
    """Run the exporter into ``path``: (exporter used, a loader of the artifact, the reference)."""
    context = config.context_length()
    if framework == "lightning":
        reference = torch_twin.reference(model, ports)
        if format == "onnx":
            exporter = onnx_torch.export(model, ports, example, context, path)
            return exporter, lambda: onnx_runtime.runner(path, ports, framework), reference
        exporter = torch_program.export(model, ports, example, context, path)
        return exporter, lambda: torch_program.runner(path, ports), reference
    from zoo.deploy import keras_twin, onnx_keras, savedmodel

    reference = keras_twin.reference(model, ports)
    if format == "onnx":
        exporter = onnx_keras.export(model, ports, path)
        return exporter, lambda: onnx_runtime.runner(path, ports, framework), reference
    exporter = savedmodel.export(model, ports, path)
    return exporter, lambda: savedmodel.runner(path, ports), reference
