"""``zoo quantize``: a float checkpoint -> a weight-only quantized one (int8 or int4), which every
command that takes a checkpoint takes.

The integers and scales are made once, by :mod:`zoo.checkpoint.quantized`, and written beside
the float tensors it leaves as they are (biases, norms); the metadata keeps everything the
float checkpoint said (config, recipe, metrics, tokenizer) and adds the scheme. The file is read
back and checked before the command says it is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.quantized import SCALE, Scheme, quantize_tensors
from zoo.checkpoint.writer import write_safetensors
from zoo.checkpoint_tokenizer import tokenizer_files
from zoo.interchange import InterchangeError
from zoo.loading import checkpoint_file
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.tokenizer import write_atomically


@dataclass(frozen=True)
class Quantized:
    """What ``zoo quantize`` wrote: the file, its scheme, how many tensors became integers, and
    the file's size beside the float checkpoint's."""

    path: Path
    scheme: Scheme
    quantized: int
    tensors: int
    bytes: int
    float_bytes: int


def quantize_checkpoint(
    checkpoint: str | Path,
    out: str | Path,
    scheme: str = "int8",
    group_size: int | None = None,
    *,
    overwrite: bool = False,
) -> Quantized:
    """``checkpoint`` (a file, a run folder, or a LoRA adapter, merged onto its base as every
    command takes one) quantized by ``scheme`` ("int8": a scale per output channel; "int4": a scale
    per ``group_size`` inputs, 32 by default) at ``out`` (a file, or a folder for
    model.safetensors), its tokenizer beside it. An output that is the input is refused,
    ``overwrite`` or not; an existing one unless ``overwrite``."""
    checkpoint, out = Path(checkpoint), Path(out)
    try:
        chosen = Scheme.of(scheme, group_size)
    except ValueError as error:
        raise InterchangeError(f"zoo quantize: {_said(error)}") from None
    checkpoint = checkpoint_file(checkpoint)  # a run folder's model; an adapter merged onto its base
    found = read_checkpoint(checkpoint)
    if found.quantization is not None:
        raise InterchangeError(
            f"{checkpoint}: already quantized ({found.quantization.describe()}); quantize the float "
            "checkpoint it was made from (quantizing twice would round twice)"
        )
    target = out / "model.safetensors" if out.is_dir() or not out.suffix else out
    carried = tokenizer_files([checkpoint.parent], target.parent)  # read and checked before any write
    refuse_inputs_as_outputs([target, *carried], [checkpoint], InterchangeError)
    if not overwrite and target.exists():
        raise InterchangeError(f"{target}: already exists; choose another --out or pass --overwrite")
    tensors = quantize_tensors(found.tensors(), chosen)
    metadata = {**found.metadata, "quantization": chosen.model_dump_json(exclude_none=True)}
    target.parent.mkdir(parents=True, exist_ok=True)
    write_safetensors(target, tensors, metadata, finite_source=checkpoint)
    read_checkpoint(target)  # what was written is a checkpoint zoo reads, or the command fails here
    for file, text in carried.items():
        write_atomically(file, text)
    quantized = sum(name.endswith(SCALE) for name in tensors)
    return Quantized(
        target, chosen, quantized, len(tensors) - quantized, target.stat().st_size, checkpoint.stat().st_size
    )


def _said(error: ValueError) -> str:
    """pydantic's words for a scheme that does not validate, without its prefixes."""
    errors = getattr(error, "errors", None)
    if errors is None:
        return str(error)
    return "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in errors()[:3])
