"""LoRA adapters through ``zoo merge``, ``zoo import PEFT_DIR --base B`` and ``zoo export ADAPTER
--format peft``: each output checked against every file the command reads, the tokenizer carried
along.
"""

from __future__ import annotations

import logging
from pathlib import Path

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint_tokenizer import carry_tokenizer, tokenizer_files
from zoo.interchange import InterchangeError
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.inputs import adapter_base, adapter_of, inputs_of
from zoo.lora import base_of, import_peft, merge_adapter, peft_export, read_adapter, saved_base
from zoo.lora.peft_layout import CONFIG, WEIGHTS
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE, write_atomically

log = logging.getLogger("zoo")


def merge(
    adapter: str | Path, out: str | Path, base: str | Path | None = None, *, overwrite: bool = False
) -> Path:
    """``zoo merge``: the adapter folded into its base (``base``, or the one it names, checked by
    its sha256) as a full checkpoint at ``out`` (a file, or a folder for model.safetensors), with
    the tokenizer beside it. An output that is an input (the adapter, the base, their tokenizer
    files) is refused, ``overwrite`` or not."""
    adapter, out = Path(adapter), Path(out)
    target = out / "model.safetensors" if out.is_dir() or not out.suffix else out
    sources = _tokenizer_sources(adapter, base)
    carried = _carried(sources, target.parent)
    refuse_inputs_as_outputs([target, *carried], _adapter_inputs(adapter, base), InterchangeError)
    _refuse_existing(carried, overwrite)
    files = tokenizer_files(sources, target.parent)  # read and checked before anything is written
    path = merge_adapter(adapter, target, base, overwrite=overwrite)
    for file, text in files.items():
        write_atomically(file, text)
    return path


def import_adapter(src: str | Path, base: str | Path, out: str | Path, *, overwrite: bool = False) -> Path:
    """``zoo import PEFT_DIR --base B``: a PEFT LoRA folder -> a zoo adapter on ``base``; an
    output that is one of the files read (the PEFT folder's, the base's) is refused, ``overwrite``
    or not."""
    src, out = Path(src), Path(out)
    target = out / "adapter.safetensors" if out.is_dir() or not out.suffix else out
    reads = [src / n for n in ("adapter_model.safetensors", "adapter_model.bin", "adapter_config.json")]
    refuse_inputs_as_outputs([target], [*reads, src, *inputs_of(base)], InterchangeError)
    return import_peft(src, base, target, overwrite=overwrite)


def export_adapter(
    adapter: str | Path, out: str | Path, *, base_out: str | Path | None = None, overwrite: bool = False
) -> Path:
    """``zoo export ADAPTER --format peft``: PEFT's ``adapter_model.safetensors`` and
    ``adapter_config.json`` in the folder ``out``, with the tokenizer. Its
    ``base_model_name_or_path`` names a base transformers loads: ``base_out``, where the base is
    written as an hf export (``--base-out``), else the transformers folder the base was imported
    from, where it still is; else none (``PeftModel.from_pretrained`` on a model loaded by hand
    still works; ``AutoPeftModel`` needs a name)."""
    adapter, out = adapter_of(Path(adapter)), Path(out)
    writes = [out / WEIGHTS, out / CONFIG, *_carried(_tokenizer_sources(adapter), out)]
    if base_out is not None:
        base_out = Path(base_out)
        writes += [
            base_out / n for n in ("model.safetensors", "config.json", TOKENIZER_FILE, TOKENIZER_CONFIG)
        ]
    refuse_inputs_as_outputs(writes, _adapter_inputs(adapter), InterchangeError)
    _refuse_existing(writes, overwrite)
    adapter_file = read_adapter(adapter)
    base = adapter_file.base.get("path")
    if base_out is not None:
        if not base:
            base_of(adapter_file)  # a seeded base: says what to give
            raise InterchangeError(f"{adapter}: its base is a seeded init, not a file: merge it instead")
        export_checkpoint(base, "hf", base_out, overwrite=overwrite)
        name = str(base_out.resolve())
    else:
        name = _transformers_source(base)
        if name is None:
            log.warning(
                f"warning: {adapter}: its base {base or '(a seeded init)'} is no transformers folder, so "
                "adapter_config.json names no base_model_name_or_path (AutoPeftModel needs one): pass "
                "--base-out DIR to write the base there as an hf export and name it"
            )
    path = peft_export.export(adapter_file, out, name, saved_base(adapter_file))
    carry_tokenizer(_tokenizer_sources(adapter), out)
    return path


def _transformers_source(base: str | None) -> str | None:
    """The transformers folder a base checkpoint was imported from, where it still is."""
    if not base or not Path(base).is_file():
        return None
    try:
        source = read_checkpoint(base).json("source", {})
    except (CheckpointError, ValueError):
        return None
    found = source.get("file") if isinstance(source, dict) and source.get("format") == "hf" else None
    return found if isinstance(found, str) and (Path(found) / "config.json").is_file() else None


def _adapter_inputs(adapter: Path, base: str | Path | None = None) -> list[Path]:
    return inputs_of(adapter, base)


def _tokenizer_sources(adapter: Path, base: str | Path | None = None) -> list[Path]:
    """Where an adapter's tokenizer is: beside it (a run folder), else beside its base."""
    named = Path(base) if base is not None else adapter_base(adapter)
    return [adapter.parent, *([named.parent] if named is not None else [])]


def _carried(sources: list[Path], folder: Path) -> list[Path]:
    """The tokenizer files :func:`zoo.checkpoint_tokenizer.carry_tokenizer` would write into ``folder``
    (none where they are already the sources' own)."""
    return [
        folder / name
        for name in (TOKENIZER_FILE, TOKENIZER_CONFIG)
        if not any((s / name).exists() and (s / name).resolve() == (folder / name).resolve() for s in sources)
    ]


def _refuse_existing(paths: list[Path], overwrite: bool) -> None:
    if overwrite:
        return
    for path in paths:
        if path.exists():
            raise InterchangeError(f"{path}: already exists; choose another --out or pass --overwrite")
