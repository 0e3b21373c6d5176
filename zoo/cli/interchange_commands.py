"""``zoo import``, ``zoo export``, ``zoo merge`` and ``zoo quantize``: weights in and out of other
libraries' layouts (torchvision, timm, transformers), deployable models (ONNX, SavedModel,
torch.export) and quantized checkpoints, each checked before it is kept. A tensor-by-tensor
progress bar shows on stderr."""

from __future__ import annotations

from pathlib import Path

import click

from zoo.cli.errors import user_errors
from zoo.cli.output import FRAMEWORKS, emit_json, for_scripts, script_output
from zoo.deploy import FORMATS, export_model
from zoo.interchange import InterchangeError
from zoo.interchange.adapters import export_adapter, import_adapter
from zoo.interchange.adapters import merge as merge_adapter
from zoo.interchange.exporting import export_checkpoint, export_writes
from zoo.interchange.importing import import_checkpoint
from zoo.interchange.inputs import adapter_of, inputs_of
from zoo.interchange.quantizing import quantize_checkpoint
from zoo.limits import MAX_HEADS
from zoo.loading import checkpoint_file
from zoo.overwrite import refuse_inputs_as_outputs


@click.command("import")
@click.argument("src", type=click.Path(path_type=Path))
@click.option(
    "-o", "--out", required=True, type=click.Path(path_type=Path),
    help="The zoo checkpoint to write: a .safetensors path, or a directory for model.safetensors.",
)  # fmt: skip
@click.option("--format", "format_", default=None, help="Source layout (torchvision, timm...); default: any.")
@click.option("--architecture", default=None, help="A family or preset the weights must be.")
@click.option(
    "--num-heads", type=click.IntRange(1, MAX_HEADS), default=None,
    help="Attention heads of weights whose config.json does not say (no tensor shape shows it; zoo "
    "never guesses).",
)  # fmt: skip
@click.option(
    "--base", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="A PEFT LoRA folder's base: the zoo checkpoint of the model it adapts (zoo import of it).",
)  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace an existing checkpoint at --out.")
@for_scripts
@user_errors
def import_(
    src: Path, out: Path, format_: str | None, architecture: str | None, num_heads: int | None,
    base: Path | None, overwrite: bool, as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """A foreign checkpoint (torchvision / timm state dict or directory) -> a zoo checkpoint; a PEFT
    LoRA folder (with --base) -> a zoo adapter.

    --quiet prints the checkpoint's path."""
    if (src / "adapter_config.json").is_file() or base is not None:
        if base is None:
            raise click.UsageError(f"{src} is a PEFT adapter: give its base with --base CHECKPOINT")
        with script_output(quiet, as_json):
            path = import_adapter(src, base, out, overwrite=overwrite)
        if as_json:
            emit_json({"path": str(path), "source": str(src), "kind": "adapter", "base": str(base)})
        else:
            click.echo(str(path) if quiet else f"{path}: LoRA adapter on {base} (PEFT layout)")
        return
    with script_output(quiet, as_json):
        done = import_checkpoint(
            src, out, format=format_, architecture=architecture, num_heads=num_heads, overwrite=overwrite
        )
    what = done.config.preset or done.family.name
    if as_json:
        emit_json({
            "path": str(done.path), "source": str(src), "architecture": what, "family": done.family.name,
            "format": done.format.name, "tensors": done.tensors,
            "tokenizer": str(done.tokenizer) if done.tokenizer else None,
            "quantization": done.quantization.describe() if done.quantization else None,
            "quantized": done.integers, "left_float": list(done.left_float),
        })  # fmt: skip
    elif quiet:
        click.echo(str(done.path))
    else:
        held = f", {done.integers} held as {done.quantization.describe()}" if done.quantization else ""
        click.echo(f"{done.path}: {what} ({done.format.name} layout, {done.tensors} tensors{held})")


@click.command("export")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option(
    "--format", "format_", required=True,
    help="A deployment format (onnx, savedmodel, torch-export) or a weight layout (torchvision, "
    "timm, hf...).",
)  # fmt: skip
@click.option(
    "-o", "--out", required=True, type=click.Path(path_type=Path),
    help="onnx: a .onnx file; savedmodel: a directory; torch-export: a .pt2 file. Weight layouts: a "
    ".safetensors or .pth/.pt file, or a directory (model.safetensors + config.json).",
)  # fmt: skip
@click.option(
    "--framework", type=click.Choice(FRAMEWORKS), default=None,
    help="The twin an onnx file is made from (default: the checkpoint's); savedmodel is Keras', "
    "torch-export torch's.",
)  # fmt: skip
@click.option(
    "--base-out", type=click.Path(path_type=Path), default=None,
    help="--format peft: also write the adapter's base here as an hf export, and name it in "
    "adapter_config.json (base_model_name_or_path), so that AutoPeftModel loads the pair.",
)  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace existing files at --out (never an input).")
@for_scripts
@user_errors
def export(
    checkpoint: Path, format_: str, out: Path, framework: str | None, base_out: Path | None, overwrite: bool,
    as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """A zoo checkpoint, a LoRA adapter (merged into its base) or a run folder -> a deployable model
    (run and checked against the training model) or a foreign weight layout (read back and checked
    bit for bit); a LoRA adapter -> PEFT's files (--format peft).

    --quiet prints the path written."""
    if base_out is not None and format_ != "peft":
        raise click.UsageError(f"--base-out goes with --format peft, not {format_!r}")
    if format_ == "peft":
        with script_output(quiet, as_json):
            path = export_adapter(checkpoint, out, base_out=base_out, overwrite=overwrite)
        if as_json:
            emit_json({"path": str(path), "format": "peft", "kind": "adapter"})
        else:
            click.echo(str(path) if quiet else f"{path}: PEFT LoRA adapter (adapter_model.safetensors)")
        return

    # An adapter (or its run folder) is exported merged onto its base: neither may be replaced. A
    # deployment replaces --out whole (a SavedModel folder), a weight layout its files.
    writes = [out] if format_ in FORMATS else export_writes(out)
    refuse_inputs_as_outputs(writes, inputs_of(checkpoint), InterchangeError)
    if format_ in FORMATS:
        with script_output(quiet, as_json):
            report = export_model(
                checkpoint_file(checkpoint), format_, out, framework=framework, overwrite=overwrite
            )
        if as_json:
            emit_json({
                "path": str(report.path), "format": report.format, "kind": "deployment",
                "framework": report.framework, "exporter": report.exporter,
                "inputs": [
                    {"name": p.name, "dtype": p.dtype, "axes": list(p.axes(report.framework))}
                    for p in report.inputs
                ],
                "checks": [
                    {"batch": c.batch, "steps": c.steps, "max_diff": c.max_diff, "tolerance": c.tolerance}
                    for c in report.checks
                ],
                "max_diff": report.max_diff,
            })  # fmt: skip
        else:
            click.echo(str(report.path) if quiet else report.summary())
        return
    if framework is not None:
        raise click.UsageError(f"--framework is for the formats {', '.join(FORMATS)}, not {format_!r}")
    with script_output(quiet, as_json):
        path = export_checkpoint(checkpoint_file(checkpoint), format_, out, overwrite=overwrite)
    if as_json:
        emit_json({"path": str(path), "format": format_, "kind": "weights", "checked": True})
    else:
        click.echo(str(path) if quiet else f"{path}: {format_} layout, read back and checked")


@click.command("merge")
@click.argument("adapter", type=click.Path(path_type=Path))
@click.option(
    "-o", "--out", required=True, type=click.Path(path_type=Path),
    help="The full checkpoint to write: a .safetensors path, or a directory for model.safetensors.",
)  # fmt: skip
@click.option(
    "--base", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="The base checkpoint (default: the one the adapter names); checked by its sha256.",
)  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace an existing checkpoint at --out (never an input).")
@for_scripts
@user_errors
def merge(adapter: Path, out: Path, base: Path | None, overwrite: bool, as_json: bool, quiet: bool) -> None:
    """A LoRA adapter folded into its base (W + scale * B A): a full checkpoint, no adapter needed.

    --quiet prints the path written."""
    with script_output(quiet, as_json):
        path = merge_adapter(adapter_of(adapter), out, base, overwrite=overwrite)
    if as_json:
        emit_json({"path": str(path), "adapter": str(adapter), "kind": "merged"})
    else:
        click.echo(str(path) if quiet else f"{path}: {adapter} merged into its base")


@click.command("quantize")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option(
    "-o", "--out", required=True, type=click.Path(path_type=Path),
    help="The quantized checkpoint to write: a .safetensors path, or a directory for model.safetensors.",
)  # fmt: skip
@click.option(
    "--scheme", type=click.Choice(["int8", "int4"]), default="int8", show_default=True,
    help="int8: one scale per output channel; int4: one scale per --group-size inputs.",
)  # fmt: skip
@click.option(
    "--group-size", type=click.IntRange(2, 1 << 20), default=None,
    help="int4's inputs per scale, even (default 32); int8 takes none.",
)  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace an existing checkpoint at --out (never the input).")
@for_scripts
@user_errors
def quantize(
    checkpoint: Path, out: Path, scheme: str, group_size: int | None, overwrite: bool, as_json: bool,
    quiet: bool,
) -> None:  # fmt: skip
    """A checkpoint with its weights quantized (weight-only, symmetric): both frameworks compute with
    the same integers times their scales; evaluate, predict, sample, compare and finetune take it.

    --quiet prints the path written."""
    with script_output(quiet, as_json):
        done = quantize_checkpoint(checkpoint, out, scheme, group_size, overwrite=overwrite)
    if as_json:
        emit_json(
            {
                "path": str(done.path), "scheme": done.scheme.model_dump(exclude_none=True),
                "quantized": done.quantized, "tensors": done.tensors, "bytes": done.bytes,
                "float_bytes": done.float_bytes,
            }
        )  # fmt: skip
    elif quiet:
        click.echo(str(done.path))
    else:
        click.echo(
            f"{done.path}: {done.scheme.describe()}, {done.quantized} of {done.tensors} tensors quantized, "
            f"{done.float_bytes / 1e6:.1f} MB -> {done.bytes / 1e6:.1f} MB "
            f"({done.float_bytes / done.bytes:.1f}x smaller)"
        )
