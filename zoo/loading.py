"""``zoo.load``: a built model from whatever a user has, in one call.

What it takes, tried in this order:

- a zoo checkpoint (``model.safetensors`` or any ``.safetensors`` file zoo wrote);
- a run folder (``recipe.yaml`` beside ``model.safetensors``), or a folder ``zoo import`` wrote:
  its ``model.safetensors``;
- a LoRA adapter (the ``adapter.safetensors`` of an ``init.lora`` run, or ``zoo import`` of a
  PEFT folder), or the run folder holding one: the adapter folded into the base it names, that
  base checked by its sha256 first, as ``zoo merge`` writes it, into
  ``$ZOO_CACHE/merged/<key>/`` with the tokenizer beside it (the key hashes the adapter's and the
  base's paths, sizes and modification times, as the import cache's does);
- a foreign directory or file (a transformers or timm folder with its ``config.json``, a
  torchvision / timm state dict ``.pth``/``.pt``/``.bin``/``.safetensors``): imported on the fly
  by :func:`zoo.interchange.importing.import_checkpoint`, with every check of ``zoo import``, into
  ``$ZOO_CACHE/imported/<key>/`` (default ``~/.cache/zoo``). The key is a hash of the source's
  resolved path and the size and modification time of every file the import reads, so an
  edited source is imported again and an unchanged one is read from the cache. Nothing is
  downloaded;
- a family or preset name (``resnet18``, ``vit-tiny``), or another library's name of one, as
  the families declare (``Family.aliases``: timm's ``vit_tiny_patch16_224`` and
  ``resnet50.tv_in1k``, transformers' ``gpt2`` and ``bert-base-uncased``): the model with fresh
  weights (``seed`` makes them the ones ``zoo train`` would start from). No weights are fetched:
  without a ``seed``, a :class:`RandomWeightsWarning` says so in one line (a transformers or timm
  user reads ``gpt2`` as pretrained weights).

A path that does not exist and a name nobody knows are refused, the name with the closest
known ones ("did you mean ...").
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import safe_open

from zoo import registry
from zoo.backend import backend_for, framework_name, load_checkpoint
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import FORMAT
from zoo.interchange.adapters import merge
from zoo.interchange.foreign_files import WEIGHT_FILES
from zoo.interchange.importing import import_checkpoint
from zoo.interchange.inputs import adapter_base, import_inputs, inputs_of, is_adapter_file
from zoo.limits import read_json, require_regular_file

log = logging.getLogger("zoo")

FOREIGN_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
CHECKPOINT = "model.safetensors"
ADAPTER = "adapter.safetensors"  # what a LoRA run exports instead of model.safetensors


@dataclass(frozen=True)
class Located:
    """Where a model comes from: a zoo checkpoint to load, or a family / preset to build."""

    checkpoint: Path | None = None
    name: str | None = None
    imported_from: Path | None = None  # the foreign source an on-the-fly import read
    adapter: Path | None = None  # the LoRA adapter merged into ``checkpoint`` (in the cache)


def load(path_or_name: str | Path, framework: str = "lightning", *, seed: int | None = None, **config: Any):
    """A torch ``nn.Module`` or a built ``keras.Model`` from a zoo checkpoint, a run folder, a
    transformers / timm / torchvision directory or file (imported on the fly), or a family,
    preset or alias name (fresh weights; ``config`` fields override the preset's). See the
    module's docstring for the order and the import cache."""
    framework = framework_name(framework)
    found = locate(path_or_name)
    if found.checkpoint is not None:
        if config or seed is not None:
            raise CheckpointError(
                f"{path_or_name}: a checkpoint's model is built from its own config and weights; "
                "seed and config fields are for a family or preset name"
            )
        return load_checkpoint(found.checkpoint, framework)
    # zoo.create_model's build (zoo.api sits above this module: it asks describe_directory)
    family, resolved = registry.get_family(found.name), registry.resolve_config(found.name, **config)
    if seed is None:
        warn_random_weights(f"zoo.load({str(path_or_name)!r})", found.name)
    return backend_for(framework).build(family, resolved, seed)


class RandomWeightsWarning(UserWarning):
    """A model built from a name: its weights are an initialisation, not trained ones."""


def warn_random_weights(call: str, name: str) -> None:
    """Say, in one line, that a name gives random weights: ``gpt2`` or ``bert-base-uncased`` read
    as a download of pretrained weights to a transformers or timm user, and zoo downloads nothing.
    A ``seed`` asks for the initialisation explicitly, and is not warned about."""
    warnings.warn(
        f"{call}: zoo's {name!r} with random weights: nothing is downloaded (zoo fetches no weights); "
        "for trained ones give a checkpoint, a run folder or a transformers / timm folder; pass seed=N "
        "to ask for the initialisation explicitly",
        RandomWeightsWarning,
        stacklevel=3,
    )


def locate(path_or_name: str | Path) -> Located:
    """What :func:`load` would load: a checkpoint file (importing a foreign source into the
    cache first) or a family / preset name."""
    path = Path(path_or_name)
    require_regular_file(path, CheckpointError)  # a FIFO or device: refused, never opened
    if path.is_file():
        return _file(path)
    if path.is_dir():
        return _directory(path)
    name = str(path_or_name)
    if isinstance(path_or_name, Path) or name.endswith(FOREIGN_SUFFIXES) or name.startswith((".", "/", "~")):
        raise CheckpointError(f"{path_or_name}: no such file or folder")
    try:
        return Located(name=registry.canonical_name(name))
    except registry.UnknownArchitectureError as error:
        if os.sep in name:  # a path, or a hub name ("org/model") zoo does not know
            raise CheckpointError(f"{name}: no such file or folder (nor a name zoo knows: {error})") from None
        raise


def _file(path: Path) -> Located:
    if path.suffix not in FOREIGN_SUFFIXES:
        raise CheckpointError(
            f"{path}: not a checkpoint zoo reads: a zoo checkpoint (.safetensors), a run folder, a "
            f"transformers or timm folder, or a state dict ({', '.join(FOREIGN_SUFFIXES)})"
        )

    if path.suffix == ".safetensors" and is_adapter_file(path):
        return Located(checkpoint=merged(path), adapter=path)
    if path.suffix == ".safetensors" and is_zoo_checkpoint(path):
        return Located(checkpoint=path)
    return Located(checkpoint=imported(path), imported_from=path)


def _directory(path: Path) -> Located:
    held = path / CHECKPOINT
    if (path / "recipe.yaml").is_file():
        if not held.is_file() and (path / ADAPTER).is_file():  # a LoRA run: its adapter, on its base
            return Located(checkpoint=merged(path / ADAPTER), adapter=path / ADAPTER)
        if not held.is_file():
            raise CheckpointError(
                f"{path}: a zoo run folder without {CHECKPOINT}: the run has not exported its checkpoint "
                f"(it is running, stopped or failed: zoo runs show {path})"
            )
        return Located(checkpoint=held)
    if held.is_file() and is_zoo_checkpoint(held):
        return Located(checkpoint=held)
    if _foreign_directory(path):
        return Located(checkpoint=imported(path), imported_from=path)
    raise CheckpointError(f"{path}: {describe_directory(path)}")


def is_zoo_checkpoint(path: Path) -> bool:
    """Whether a safetensors file carries zoo's marker (any other file, or one that does not
    open, is not: :func:`zoo.checkpoint.metadata.read_checkpoint` says why when it is read)."""
    try:
        with safe_open(str(path), framework="np") as handle:
            return (handle.metadata() or {}).get("format") == FORMAT
    except Exception:  # safetensors raises its own error type, or OSError
        return False


def checkpoint_file(path_or_name: str | Path) -> Path:
    """The zoo checkpoint file a command reads for ``path_or_name``: the file itself, a run
    folder's, an adapter merged onto its base, or a foreign source imported (all cached, see the
    module's docstring). A family or preset name, which has no trained weights, is refused."""
    found = locate(path_or_name)
    if found.checkpoint is None:
        raise CheckpointError(
            f"{path_or_name}: names the architecture {found.name!r}, which has no trained weights; give a "
            "checkpoint (a .safetensors file, a LoRA adapter, a run folder, or a folder to import)"
        )
    return found.checkpoint


def _foreign_directory(path: Path) -> bool:
    return any((path / name).is_file() for name in (*WEIGHT_FILES, "model.safetensors.index.json"))


def describe_directory(path: Path) -> str:
    """What a folder holds, in the words of what to call on it (``zoo.load_checkpoint``, which
    reads one file, says this when given a folder)."""
    path = Path(path)
    held = path / CHECKPOINT
    if (path / "recipe.yaml").is_file():
        if held.is_file():
            return (
                f"a zoo run folder; its checkpoint is {held}: zoo.load_checkpoint('{held}'), or "
                f"zoo.load('{path}') for the folder"
            )
        if (path / ADAPTER).is_file():
            return (
                f"a zoo LoRA run folder; its adapter is {path / ADAPTER}: zoo.load('{path}') loads it merged "
                "into its base"
            )
        return f"a zoo run folder that has not exported {CHECKPOINT} yet (zoo runs show {path})"
    if held.is_file() and is_zoo_checkpoint(held):
        return (
            f"a folder holding the zoo checkpoint {held}: zoo.load_checkpoint('{held}'), or "
            f"zoo.load('{path}')"
        )
    if _foreign_directory(path):
        kind = _foreign_kind(path)
        return (
            f"a {kind} folder, not a zoo checkpoint: zoo.load('{path}') imports and loads it, or "
            f"zoo.import_checkpoint('{path}', OUT) writes it as one"
        )
    found = sorted(p.name for p in path.iterdir())[:10]
    return (
        "a folder that holds no checkpoint (no model.safetensors, pytorch_model.bin or recipe.yaml); it has: "
        + (", ".join(found) or "nothing")
    )


def _foreign_kind(path: Path) -> str:
    """transformers' or timm's, as its config.json says (timm's names an ``architecture`` and a
    ``pretrained_cfg``, transformers' a ``model_type``)."""
    config = path / "config.json"
    if not config.is_file():
        return "weights"
    try:
        meta = read_json(config, error=ValueError)
    except ValueError:
        return "weights"
    if "pretrained_cfg" in meta or "architecture" in meta:
        return "timm"
    return "transformers" if "model_type" in meta or "architectures" in meta else "weights"


# ------------------------------------------------------------------------------ the import cache


def cache_root(kind: str = "imported") -> Path:
    return Path(os.environ.get("ZOO_CACHE") or Path.home() / ".cache" / "zoo") / kind


def _stamp(digest, path: Path) -> None:
    """Add a file's name, size and modification time to a cache key (an edited file, a new key)."""
    if path.is_file():
        stat = path.stat()
        digest.update(f"\0{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())


def merged(adapter: Path) -> Path:
    """The full checkpoint of a LoRA adapter on its base, merged once into the cache (as
    ``zoo merge`` writes it, the base checked by its sha256, the tokenizer beside it), renamed
    into place when whole, as :func:`imported` does."""
    base = adapter_base(adapter)
    if base is not None and not base.is_file():
        raise CheckpointError(
            f"{adapter}: the base it was trained on, {base}, is not there (moved or deleted?): put it "
            f"back, or merge the adapter onto that base elsewhere (zoo merge {adapter} --base CKPT --out DIR)"
        )
    digest = hashlib.sha256(str(adapter.resolve()).encode())
    for read in inputs_of(adapter):
        digest.update(f"\0{read.resolve()}".encode())
        _stamp(digest, read)
    folder = cache_root("merged") / f"{adapter.parent.name}-{adapter.stem}-{digest.hexdigest()[:16]}"
    return _made_once(
        folder,
        lambda partial: merge(adapter, partial / CHECKPOINT),
        f"merged the adapter {adapter} into its base in {folder} (zoo.load's cache: $ZOO_CACHE/merged)",
    )


def imported(src: Path) -> Path:
    """The zoo checkpoint of a foreign source, imported once into the cache (see the module's
    docstring for the key). The import writes into a folder of its own, renamed into place when
    whole: two processes importing the same source each finish, and one folder stays."""
    digest = hashlib.sha256(str(src.resolve()).encode())
    for read in import_inputs(src):
        _stamp(digest, read)
    folder = cache_root() / f"{src.name}-{digest.hexdigest()[:16]}"
    return _made_once(
        folder,
        lambda partial: import_checkpoint(src, partial),
        f"imported {src} into {folder} (zoo.load's cache: $ZOO_CACHE/imported)",
    )


def _made_once(folder: Path, make, said: str) -> Path:
    """``folder``'s checkpoint, made by ``make(partial)`` in a folder of this process's own and
    renamed into place when whole: two processes making the same one each finish, and one
    folder stays."""
    if (folder / CHECKPOINT).is_file():
        return folder / CHECKPOINT
    partial = folder.with_name(f".{folder.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        make(partial)
        log.info(said)
        partial.rename(folder)
    except OSError:
        if not (folder / CHECKPOINT).is_file():  # another process did not finish it first
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder / CHECKPOINT
