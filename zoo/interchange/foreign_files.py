"""Foreign weight files read as numpy arrays (float32 where floating): ``.safetensors`` (bfloat16
through torch), torch state dicts (``.pth``/``.pt``/``.bin`` through
``torch.load(weights_only=True)``, so nothing but tensors is unpickled; training scripts' wrappers
and DistributedDataParallel's ``module.`` prefix taken off) and transformers folders (one weight
file, or the shards its index names inside the folder; compressed-tensors' int8 / int4 weights as
their float32 weights, :mod:`zoo.interchange.compressed_tensors`). Nothing is downloaded.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open

from zoo.checkpoint.file import CheckpointError, read_header
from zoo.checkpoint.foreign import Tensors
from zoo.interchange import InterchangeError
from zoo.interchange.compressed_tensors import Held, held, read_scheme
from zoo.limits import json_kind, read_json
from zoo.progress import track

TORCH_SUFFIXES = (".pth", ".pt", ".bin")

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # what a directory holds, in order of preference


# Containers that training scripts wrap a state dict in (torch.save({"state_dict": ...})).
WRAPPERS = ("state_dict", "model_state_dict", "model", "module")


def read_foreign(src: str | Path) -> tuple[Tensors, dict[str, Any]]:
    """A foreign file's tensors (float32 where floating) and the ``config.json`` beside them."""
    tensors, meta, _ = read_foreign_held(src)
    return tensors, meta


def read_foreign_held(src: str | Path) -> tuple[Tensors, dict[str, Any], Held | None]:
    """:func:`read_foreign`, and the integers a quantized folder holds: compressed-tensors'
    weight-only int8 / int4 (zoo.interchange.compressed_tensors) read as their float32 weights, the
    ``quantization_config`` taken out of the config (the tensors are float now) and kept in
    :class:`Held`; every other quantization refused by name before a weight is read."""
    src = Path(src)
    meta: dict[str, Any] = {}
    scheme = None
    if src.is_dir():
        config = src / "config.json"
        if config.is_file():
            meta = read_json(config, error=InterchangeError, fix="it should be transformers' config.json")
            scheme = read_scheme(config, meta)
        weights = directory_weights(src)
    elif src.is_file():
        weights = [src]
    else:
        raise InterchangeError(f"{src}: no such file or directory")
    tensors: Tensors = {}
    for path in weights:
        tensors.update(read_weight_file(path))
    if not tensors:
        raise InterchangeError(f"{src}: holds no tensors")
    if scheme is None:
        return tensors, meta, None
    tensors, found = held(tensors, scheme, meta, src)
    return tensors, {key: value for key, value in meta.items() if key != "quantization_config"}, found


def directory_weights(src: Path) -> list[Path]:
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


def read_weight_file(path: Path) -> Tensors:
    if path.suffix in TORCH_SUFFIXES:
        return _read_torch(path)
    if path.suffix != ".safetensors":
        raise InterchangeError(
            f"{path}: unknown weight file type {path.suffix!r}; zoo imports .safetensors, "
            f"{', '.join(TORCH_SUFFIXES)} (a torch state dict) or a directory holding them"
        )
    try:
        with safe_open(str(path), framework="np") as handle:
            if (handle.metadata() or {}).get("format") == "zoo-checkpoint":
                raise InterchangeError(f"{path}: is already a zoo checkpoint; use it as it is")
            read_header(path)  # a tensor named twice, which safe_open reads as one of the two
            keys = track(handle.keys(), f"reading {path.name}", unit="tensor")
            return {key: as_float32(handle.get_tensor(key)) for key in keys}
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


def as_float32(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float32) if np.issubdtype(array.dtype, np.floating) else array
