"""What a command reads, which none of its outputs may replace: a checkpoint (or a run folder's,
or a foreign source's files), the tokenizer files beside it, and for a LoRA adapter its base with
its own; and where a LoRA run folder's adapter and the base an adapter names are.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open

from zoo.checkpoint.file import CheckpointError
from zoo.interchange.foreign_files import WEIGHT_FILES, directory_weights
from zoo.interchange.tokenizer_io import TOKENIZER_FILES
from zoo.lora.adapter_file import is_adapter
from zoo.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE

# What an import reads from a directory besides its weights.
SIDE_FILES = ("config.json", "model.safetensors.index.json", "tokenizer_config.json", "merges.txt")


def import_inputs(src: Path) -> list[Path]:
    """Every file an import of ``src`` reads."""
    if not src.is_dir():
        return [src]
    return [*directory_weights(src), *(src / name for name in (*SIDE_FILES, *TOKENIZER_FILES))]


ADAPTER_FILE = "adapter.safetensors"  # what a LoRA run exports instead of model.safetensors
BESIDE = (TOKENIZER_FILE, TOKENIZER_CONFIG)  # the tokenizer files that travel beside a checkpoint


def is_adapter_file(path: Path) -> bool:
    """Whether a safetensors file is a zoo LoRA adapter (kind ``adapter``)."""
    return is_adapter(path)


def adapter_of(path: Path) -> Path:
    """The adapter file a LoRA run folder holds; any other path as it is."""
    path = Path(path)
    if path.is_dir() and (path / ADAPTER_FILE).is_file() and not (path / WEIGHT_FILES[0]).is_file():
        return path / ADAPTER_FILE
    return path


def adapter_base(path: Path) -> Path | None:
    """The base checkpoint an adapter file names (None: a seeded base, or metadata that does not
    say; reading the adapter says what is wrong with it)."""
    try:
        with safe_open(str(path), framework="np") as handle:
            named = json.loads((handle.metadata() or {}).get("base", "{}")).get("path")
    except Exception:  # not an adapter zoo reads: read_adapter says why
        return None
    return Path(named) if isinstance(named, str) and named else None


def inputs_of(path: str | Path, base: str | Path | None = None) -> list[Path]:
    """Every file a command reading ``path`` reads, which none of its outputs may replace: the
    checkpoint (or a run folder's, or a foreign source's files), the tokenizer files beside it,
    and for a LoRA adapter its base (``base``, or the one the adapter names) with its own."""
    path = Path(path)
    if path.is_dir():
        held = [path / name for name in (WEIGHT_FILES[0], ADAPTER_FILE) if (path / name).is_file()]
        try:
            foreign = import_inputs(path)  # a folder to import: its weights, config and tokenizer
        except CheckpointError:  # no weights to import: reading the folder says what it holds
            foreign = []
        files = list(dict.fromkeys([*held, *foreign]))
    else:
        files = [path]
    found: list[Path] = []
    for file in files:
        found += [file, *(file.with_name(name) for name in BESIDE)]
        if file.suffix == ".safetensors" and is_adapter_file(file):
            named = Path(base) if base is not None else adapter_base(file)
            if named is not None:
                found += [named, *(named.with_name(name) for name in BESIDE)]
    return list(dict.fromkeys(found))
