"""``zoo export``: a zoo checkpoint -> a foreign layout (a ``.safetensors`` file, a torch state
dict, or a folder with ``config.json`` and the tokenizer). Every export is read back through its
format and compared bit for bit with what was written, so a file that would not load where it is
going is never left behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from zoo.checkpoint.foreign import ForeignFormat, ForeignLayoutError, Tensors
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.writer import write_safetensors
from zoo.checkpoint_tokenizer import saved_tokenizer
from zoo.interchange import InterchangeError
from zoo.interchange.foreign_files import TORCH_SUFFIXES, as_float32, read_weight_file
from zoo.interchange.inputs import inputs_of
from zoo.interchange.tokenizer_io import save_tokenizer
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.progress import track
from zoo.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE


def export_checkpoint(
    checkpoint: str | Path, format: str, out: str | Path, *, overwrite: bool = False
) -> Path:
    """A zoo checkpoint -> ``format``'s layout at ``out``: a ``.safetensors`` file, a torch
    ``.pth``/``.pt``/``.bin`` state dict, or a directory (``model.safetensors`` and the
    ``config.json`` the foreign library reads, with the tokenizer and its
    ``tokenizer_config.json``). Returns the weight file written. (``zoo export`` of a LoRA adapter
    or a run folder hands this the checkpoint :func:`zoo.loading.checkpoint_file` resolves it to,
    having refused an output on the adapter's inputs.)"""
    out = Path(out)
    is_file = out.suffix in (".safetensors", *TORCH_SUFFIXES)
    path, *beside = export_writes(out)
    refuse_inputs_as_outputs([path, *beside], inputs_of(checkpoint), InterchangeError)
    ckpt = read_checkpoint(checkpoint)
    try:
        fmt = ckpt.family.format(format)
    except ValueError as error:
        raise InterchangeError(f"{checkpoint}: {error}") from None
    reading = track(ckpt.tensors().items(), f"reading {Path(checkpoint).name}", unit="tensor")
    canonical = {k: as_float32(v) for k, v in reading}
    source = ckpt.json("source", {})
    imported = source.get("config") if source.get("format") == format else None  # what zoo does not model
    from zoo.data.preprocessing import of_checkpoint

    try:
        tensors, meta = fmt.write(ckpt.config, canonical, imported, of_checkpoint(ckpt))
    except ForeignLayoutError as error:  # a config the foreign library has no equivalent of
        raise InterchangeError(f"{checkpoint}: cannot be written as {format}: {error}") from None
    for target in (path, *(() if is_file or meta is None else (out / "config.json",))):
        if target.exists() and not overwrite:
            raise InterchangeError(f"{target}: already exists; choose another --out or pass --overwrite")
    if path.suffix in TORCH_SUFFIXES:
        _write_torch(path, tensors)
    else:
        write_safetensors(path, tensors, {"format": "pt"})  # the marker transformers checks for
    if meta is not None and not is_file:
        _write_json(out / "config.json", meta)
        tokenizer = saved_tokenizer(ckpt)  # transformers' fast tokenizers read tokenizer.json
        if tokenizer is not None:
            save_tokenizer(tokenizer, ckpt.path.parent, out)
    _verify(path, fmt, meta, canonical)
    return path


def export_writes(out: str | Path) -> list[Path]:
    """What an export to a weight layout at ``out`` writes: the weight file first, then (into a
    folder) its ``config.json`` and tokenizer files."""
    out = Path(out)
    if out.suffix in (".safetensors", *TORCH_SUFFIXES):
        return [out]
    return [out / "model.safetensors", out / "config.json", out / TOKENIZER_FILE, out / TOKENIZER_CONFIG]


def _write_torch(path: Path, tensors: Tensors) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # np.require keeps a 0-d counter 0-d (np.ascontiguousarray would make it shape (1,))
        state = {k: torch.from_numpy(np.require(v, requirements="C")) for k, v in tensors.items()}
        torch.save(state, temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(temporary, path)


def _verify(path: Path, fmt: ForeignFormat, meta, canonical: Tensors) -> None:
    """Read the written file back through the format: the same tensors, bit for bit."""
    _, back = fmt.read(read_weight_file(path), meta or {})
    checking = track(canonical, f"checking {path.name}", unit="tensor")
    bad = [k for k in checking if k not in back or not np.array_equal(back[k], canonical[k])]
    if bad or set(back) != set(canonical):
        path.unlink(missing_ok=True)
        raise AssertionError(f"{path}: reading the {fmt.name} export back changed {bad[:5]}; removed it")
