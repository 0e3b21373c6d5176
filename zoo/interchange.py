"""``zoo import`` and ``zoo export``: foreign weight files in and out of zoo checkpoints.

The layouts themselves belong to the families (``Family.formats``, see :mod:`zoo.checkpoint.foreign`);
this module reads and writes the files around them. Reading never unpickles arbitrary
objects: ``.pth``/``.pt``/``.bin`` go through ``torch.load(weights_only=True)``. Nothing is
downloaded. Every export is read back through its format and compared bit for bit with
what was written, so a file that would not load where it is going is never left behind.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo import registry
from zoo.checkpoint.file import CheckpointError, read_header
from zoo.checkpoint.foreign import ForeignFormat, ForeignLayoutError, Tensors
from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint
from zoo.checkpoint.tables import tensor_specs
from zoo.checkpoint.writer import write_safetensors
from zoo.family import Family
from zoo.limits import json_kind, read_json
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.peak_memory import check_memory, import_estimate
from zoo.preprocessing import Preprocessing, PreprocessingError, TextPreprocessing
from zoo.progress import track
from zoo.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE

log = logging.getLogger("zoo")

TORCH_SUFFIXES = (".pth", ".pt", ".bin")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # what a directory holds, in order of preference
# Containers that training scripts wrap a state dict in (torch.save({"state_dict": ...})).
WRAPPERS = ("state_dict", "model_state_dict", "model", "module")


class InterchangeError(CheckpointError):
    """A foreign file that cannot be imported or a checkpoint that cannot be exported as asked."""


@dataclass(frozen=True)
class Imported:
    path: Path
    family: Family
    format: ForeignFormat
    config: Any
    tensors: int
    tokenizer: Path | None = None  # the source directory's tokenizer, saved next to the checkpoint


# ------------------------------------------------------------------------------- read


def read_foreign(src: str | Path) -> tuple[Tensors, dict[str, Any]]:
    """A foreign file's tensors (float32 where floating) and the ``config.json`` beside them."""
    src = Path(src)
    meta: dict[str, Any] = {}
    if src.is_dir():
        config = src / "config.json"
        if config.is_file():
            meta = read_json(config, error=InterchangeError, fix="it should be transformers' config.json")
        weights = _directory_weights(src)
    elif src.is_file():
        weights = [src]
    else:
        raise InterchangeError(f"{src}: no such file or directory")
    tensors: Tensors = {}
    for path in weights:
        tensors.update(_read_file(path))
    if not tensors:
        raise InterchangeError(f"{src}: holds no tensors")
    return tensors, meta


def _directory_weights(src: Path) -> list[Path]:
    index = src / "model.safetensors.index.json"
    if index.is_file():  # sharded, as transformers writes large models
        weight_map = _weight_map(index)
        return [_shard(src, index, weight_map, shard) for shard in sorted(set(weight_map.values()))]
    for name in WEIGHT_FILES:
        if (src / name).is_file():
            return [src / name]
    found = sorted(p.name for p in src.iterdir())
    raise InterchangeError(
        f"{src}: a directory without weights; expected one of {', '.join(WEIGHT_FILES)} "
        f"(or a sharded model.safetensors.index.json), found: {', '.join(found[:10]) or 'nothing'}"
    )


def _weight_map(index: Path) -> dict[str, str]:
    """A sharded model's index (its ``weight_map``: tensor -> shard file), checked to be one."""
    fix = 'a sharded model\'s index is {"weight_map": {"tensor name": "shard file name", ...}}'
    weight_map = read_json(index, error=InterchangeError, fix=fix).get("weight_map")
    if not isinstance(weight_map, dict):
        found = (
            "no weight_map" if weight_map is None else f"a weight_map that is a JSON {json_kind(weight_map)}"
        )
        raise InterchangeError(f"{index}: has {found}; {fix}")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str):
            raise InterchangeError(f"{index}: weight_map maps {tensor!r} to a JSON {json_kind(shard)}; {fix}")
    return weight_map


def _shard(src: Path, index: Path, weight_map: dict[str, Any], shard: Any) -> Path:
    """A shard the index names, which must be a file of the folder being imported: a path
    elsewhere (``../other/model.safetensors``, ``/abs/path``, a link out of the folder) would
    import weights that are not the folder's. A link into the Hugging Face cache's ``blobs``
    folder beside the snapshot is the cache's own layout, and is followed."""
    path = src / shard if isinstance(shard, str) else None
    if path is None or shard in ("", ".", "..") or Path(shard).name != shard or "\\" in shard:
        where = "not a file name"
    else:
        resolved, folders = path.resolve(), (src.resolve(), src.resolve().parent.parent / "blobs")
        if path.is_symlink() and resolved.parent not in folders:
            where = f"a link to {resolved}, outside the folder"
        else:
            return path
    entry = next(key for key, value in weight_map.items() if value == shard)
    raise InterchangeError(
        f"{index}: weight_map entry {entry!r} names the shard {shard!r}, {where}; a sharded "
        f"checkpoint's shards are files of its own folder ({src}): import only folders whose index "
        "names files beside it"
    )


def _read_file(path: Path) -> Tensors:
    if path.suffix in TORCH_SUFFIXES:
        return _read_torch(path)
    if path.suffix != ".safetensors":
        raise InterchangeError(
            f"{path}: unknown weight file type {path.suffix!r}; zoo imports .safetensors, "
            f"{', '.join(TORCH_SUFFIXES)} (a torch state dict) or a directory holding them"
        )
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as handle:
            if (handle.metadata() or {}).get("format") == "zoo-checkpoint":
                raise InterchangeError(f"{path}: is already a zoo checkpoint; use it as it is")
            read_header(path)  # a tensor named twice, which safe_open reads as one of the two
            keys = track(handle.keys(), f"reading {path.name}", unit="tensor")
            return {key: _float32(handle.get_tensor(key)) for key in keys}
    except CheckpointError:
        raise
    except TypeError:  # bfloat16: numpy has no such dtype, torch reads it
        return _read_torch_safetensors(path)
    except Exception as error:
        raise InterchangeError(f"{path}: not a readable safetensors file ({error})") from None


def _read_torch_safetensors(path: Path) -> Tensors:
    from safetensors.torch import load_file

    loaded = track(load_file(path).items(), f"converting {path.name}", unit="tensor")
    return {key: _torch_array(value) for key, value in loaded}


def _read_torch(path: Path) -> Tensors:
    import pickle

    import torch

    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise InterchangeError(
            f"{path}: holds objects other than tensors, which zoo does not unpickle "
            f"(torch.load(weights_only=True) refused it: {str(error).splitlines()[0]}). "
            "Save the model's state_dict() instead, or convert it to .safetensors."
        ) from None
    except Exception as error:
        raise InterchangeError(f"{path}: not a readable torch file ({error})") from None
    for key in WRAPPERS:
        if isinstance(loaded, dict) and isinstance(loaded.get(key), dict):
            loaded = loaded[key]
            break
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise InterchangeError(
            f"{path}: is not a state dict (a mapping of names to tensors), nor one wrapped under "
            f"{', '.join(repr(w) for w in WRAPPERS)}"
        )
    converting = track(loaded.items(), f"converting {path.name}", unit="tensor")
    tensors = {key: _torch_array(value) for key, value in converting}
    if all(key.startswith("module.") for key in tensors):  # saved from DistributedDataParallel
        tensors = {key.removeprefix("module."): value for key, value in tensors.items()}
    return tensors


def _torch_array(tensor) -> np.ndarray:
    import torch

    if tensor.is_floating_point():
        tensor = tensor.to(torch.float32)
    return tensor.detach().contiguous().numpy()


def _float32(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float32) if np.issubdtype(array.dtype, np.floating) else array


# ----------------------------------------------------------------------------- import


def import_checkpoint(
    src: str | Path,
    out: str | Path,
    *,
    format: str | None = None,
    architecture: str | None = None,
    num_heads: int | None = None,
    overwrite: bool = False,
) -> Imported:
    """A torchvision / timm / transformers file or directory -> a zoo checkpoint at ``out``.

    Every registered family's formats (or only ``format``, only ``architecture``'s) are
    tried; the first that places every tensor wins. ``architecture`` may be a preset name:
    then the weights must be that preset (resnet50 weights are not a resnet18). ``num_heads``
    is the attention head count of weights whose ``config.json`` does not say it (no shape
    shows it, and zoo does not guess). The ``config.json`` read is kept in the checkpoint's
    ``source`` metadata, so that an export to the same layout writes back what zoo's config
    does not model.
    """
    src, target = Path(src), _target(out)
    beside = [target.parent / TOKENIZER_FILE, target.parent / TOKENIZER_CONFIG]
    refuse_inputs_as_outputs([target, *beside], import_inputs(src), InterchangeError)
    if target.exists() and not overwrite:
        raise InterchangeError(f"{target}: already exists; choose another --out or pass --overwrite")
    if src.exists():  # else read_foreign says so
        weights = _directory_weights(src) if src.is_dir() else [src]
        check_memory(
            import_estimate(weights, TORCH_SUFFIXES), ["free some memory, or import on a larger machine"]
        )
    tensors, meta = read_foreign(src)
    candidates = _candidates(format, architecture)
    failures: list[tuple[Family, ForeignFormat, ForeignLayoutError]] = []
    for family, fmt in candidates:
        try:
            fields, canonical = fmt.read(tensors, meta, num_heads)
        except ForeignLayoutError as error:
            failures.append((family, fmt, error))
            continue
        config = _config(family, fields, architecture, src, fmt)
        _check_placed(family, config, canonical, fmt)
        tokenizer = _source_tokenizer(src, config)  # checked before anything is written
        preprocessing = _source_preprocessing(src, fmt, config, meta, tokenizer)
        source = {"file": str(src.resolve()), "format": fmt.name} | ({"config": meta} if meta else {})
        path = write_checkpoint(
            target, config, canonical, framework="imported", source=source, preprocessing=preprocessing
        )
        saved = _save_tokenizer(tokenizer, src, path.parent) if tokenizer is not None else None
        return Imported(path, family, fmt, config, len(canonical), saved)
    raise InterchangeError(_nothing_fits(src, tensors, failures))


TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt")
# What an import reads from a directory besides its weights.
SIDE_FILES = ("config.json", "model.safetensors.index.json", "tokenizer_config.json", "merges.txt")


def import_inputs(src: Path) -> list[Path]:
    """Every file an import of ``src`` reads."""
    if not src.is_dir():
        return [src]
    return [*_directory_weights(src), *(src / name for name in (*SIDE_FILES, *TOKENIZER_FILES))]


def _save_tokenizer(tokenizer, src: Path, folder: Path) -> Path:
    """The tokenizer beside its checkpoint, with the source's ``tokenizer_config.json`` (the
    special tokens' roles, which tokenizer.json does not say), or one made from the tokenizer."""
    from zoo.checkpoint_tokenizer import tokenizer_config
    from zoo.tokenizer import write_atomically

    saved = tokenizer.save(folder)
    settings = src / TOKENIZER_CONFIG if src.is_dir() else None
    if settings is not None and settings.is_file():
        fix = "it should be transformers' tokenizer_config.json, or be removed"
        found = read_json(settings, error=InterchangeError, fix=fix)
    else:
        found = tokenizer_config(tokenizer)
    write_atomically(folder / TOKENIZER_CONFIG, json.dumps(found, indent=2) + "\n")
    return saved


def _source_tokenizer(src: Path, config):
    """The tokenizer a transformers directory carries (tokenizer.json, GPT-2's vocab.json +
    merges.txt, or BERT's vocab.txt, lower-cased as its tokenizer_config.json says), so that the
    imported checkpoint samples and fine-tunes with the token ids its weights were trained on."""
    if not src.is_dir() or not any((src / name).is_file() for name in TOKENIZER_FILES):
        return None
    from zoo.tokenizer import TokenizerError, load_tokenizer

    lowercase = None
    if not (src / "tokenizer.json").is_file() and (src / "vocab.txt").is_file():
        settings = src / "tokenizer_config.json"
        if settings.is_file():
            fix = "it should be transformers' tokenizer_config.json, or be removed"
            found = read_json(settings, error=InterchangeError, fix=fix)
            lowercase = bool(found.get("do_lower_case", True))
    try:
        tokenizer = load_tokenizer(src, lowercase)
    except (TokenizerError, ValueError) as error:
        raise InterchangeError(f"{src}: its tokenizer files cannot be read: {error}") from None
    vocab = getattr(config, "vocab_size", None)
    if vocab is not None and tokenizer.vocab_size > vocab:
        raise InterchangeError(
            f"{src}: its tokenizer has {tokenizer.vocab_size} tokens but the weights' vocabulary "
            f"has {vocab}; the tokenizer files belong to another model"
        )
    return tokenizer


def _source_preprocessing(src: Path, fmt: ForeignFormat, config, meta: dict[str, Any], tokenizer):
    """What the foreign files say the inputs went through (the format's reading of its config:
    timm's pretrained_cfg, transformers' id2label, torchvision's eval transform), with the
    tokenizer imported beside the checkpoint; checked against the model it is recorded for."""
    try:
        found = fmt.read_preprocessing(config, meta)
    except PreprocessingError as error:
        raise InterchangeError(f"{src}: {error}") from None
    if tokenizer is not None:
        text = TextPreprocessing(tokenizer="tokenizer.json", fingerprint=tokenizer.fingerprint())
        found = (
            found.replace(text=text)
            if found
            else Preprocessing(source=f"{fmt.name} tokenizer files", text=text)
        )
    image = found.image if found is not None else None
    if image is not None and (image.channel_count, image.size, image.size) != config.sample_shape():
        raise InterchangeError(
            f"{src}: its config says images are {image.channel_count} x {image.size} x {image.size} "
            f"but the weights read {' x '.join(map(str, config.sample_shape()))}"
        )
    return found


def _target(out: str | Path) -> Path:
    out = Path(out)
    return out if out.suffix == ".safetensors" else out / "model.safetensors"


def _candidates(format: str | None, architecture: str | None) -> list[tuple[Family, ForeignFormat]]:
    families = list(registry.families().values())
    if architecture:
        families = [registry.families()[registry.get_family(architecture).name]]
    found = [(f, fmt) for f in families for fmt in f.formats if format in (None, fmt.name)]
    if not found:
        known = sorted({fmt.name for f in families for fmt in f.formats})
        scope = f"the {families[0].name!r} family" if architecture else "any registered family"
        raise InterchangeError(
            f"{scope} has no weight format {format!r}; known: {', '.join(known) or 'none'}"
            if format
            else f"{scope} reads no foreign weight format"
        )
    return found


def _config(family: Family, fields: dict[str, Any], architecture: str | None, src: Path, fmt):
    try:
        config = family.config.model_validate({**fields, "architecture": family.name})
    except ValueError as error:
        raise InterchangeError(
            f"{src}: {fmt.name} weights read as an invalid {family.name} config: {error}"
        ) from None
    if architecture and architecture in registry.presets():
        preset = registry.resolve_config(architecture)
        differ = [
            k for k in preset.model_fields if k != "preset" and getattr(preset, k) != getattr(config, k)
        ]
        differ = [k for k in differ if k not in family.config.DATA_FIELDS]
        if differ:
            raise InterchangeError(
                f"{src}: these {fmt.name} weights are not the preset {architecture!r}: "
                + ", ".join(f"{k} is {getattr(config, k)!r}, not {getattr(preset, k)!r}" for k in differ)
            )
        config = config.model_copy(update={"preset": architecture})
    return config


def _check_placed(family: Family, config, tensors: Tensors, fmt: ForeignFormat) -> None:
    """A format's output against the family's own table: a mismatch is a bug in the format."""
    specs = tensor_specs(family.weight_table(config))
    wrong = sorted(set(specs) ^ set(tensors)) + [
        f"{name} {list(tensors[name].shape)} != {list(spec.shape)}"
        for name, spec in specs.items()
        if name in tensors and tuple(tensors[name].shape) != spec.shape
    ]
    if wrong:
        raise AssertionError(
            f"the {family.name} family's {fmt.name!r} format placed tensors wrongly: {wrong[:5]}"
        )


def _nothing_fits(src: Path, tensors: Tensors, failures) -> str:
    keys = list(tensors)
    text = (
        f"{src}: no registered weight format places these {len(keys)} tensors "
        f"(first keys: {', '.join(keys[:4])})."
    )
    for family, fmt, error in sorted(failures, key=lambda f: len(f[2].unplaced))[:3]:
        text += f"\n  {family.name} / {fmt.name}: {error}"
    return text


# ----------------------------------------------------------------------------- export


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
    canonical = {k: _float32(v) for k, v in reading}
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
        from zoo.checkpoint_tokenizer import saved_tokenizer

        tokenizer = saved_tokenizer(ckpt)  # transformers' fast tokenizers read tokenizer.json
        if tokenizer is not None:
            _save_tokenizer(tokenizer, ckpt.path.parent, out)
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
    _, back = fmt.read(_read_file(path), meta or {})
    checking = track(canonical, f"checking {path.name}", unit="tensor")
    bad = [k for k in checking if k not in back or not np.array_equal(back[k], canonical[k])]
    if bad or set(back) != set(canonical):
        path.unlink(missing_ok=True)
        raise AssertionError(f"{path}: reading the {fmt.name} export back changed {bad[:5]}; removed it")


# ------------------------------------------------------------------------ LoRA adapters

ADAPTER_FILE = "adapter.safetensors"  # what a LoRA run exports instead of model.safetensors
BESIDE = (TOKENIZER_FILE, TOKENIZER_CONFIG)  # the tokenizer files that travel beside a checkpoint


def is_adapter_file(path: Path) -> bool:
    """Whether a safetensors file is a zoo LoRA adapter (kind ``adapter``)."""
    from zoo.lora.adapter_file import is_adapter

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
    import json

    from safetensors import safe_open

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


def merge(
    adapter: str | Path, out: str | Path, base: str | Path | None = None, *, overwrite: bool = False
) -> Path:
    """``zoo merge``: the adapter folded into its base (``base``, or the one it names, checked by
    its sha256) as a full checkpoint at ``out`` (a file, or a folder for model.safetensors), with
    the tokenizer beside it. An output that is an input (the adapter, the base, their tokenizer
    files) is refused, ``overwrite`` or not."""
    from zoo.lora import merge_adapter

    adapter, out = Path(adapter), Path(out)
    target = out / "model.safetensors" if out.is_dir() or not out.suffix else out
    sources = _tokenizer_sources(adapter, base)
    carried = _carried(sources, target.parent)
    refuse_inputs_as_outputs([target, *carried], _adapter_inputs(adapter, base), InterchangeError)
    _refuse_existing(carried, overwrite)
    from zoo.checkpoint_tokenizer import tokenizer_files
    from zoo.tokenizer import write_atomically

    files = tokenizer_files(sources, target.parent)  # read and checked before anything is written
    path = merge_adapter(adapter, target, base, overwrite=overwrite)
    for file, text in files.items():
        write_atomically(file, text)
    return path


def import_adapter(src: str | Path, base: str | Path, out: str | Path, *, overwrite: bool = False) -> Path:
    """``zoo import PEFT_DIR --base B``: a PEFT LoRA folder -> a zoo adapter on ``base``; an
    output that is one of the files read (the PEFT folder's, the base's) is refused, ``overwrite``
    or not."""
    from zoo.lora import import_peft

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
    from zoo.checkpoint_tokenizer import carry_tokenizer
    from zoo.lora import base_of, peft_export, read_adapter, saved_base
    from zoo.lora.peft_layout import CONFIG, WEIGHTS

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
