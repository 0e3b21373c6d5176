"""A LoRA adapter's file: a zoo safetensors of kind ``adapter`` holding the adapter's tensors
(:mod:`zoo.lora.adapter`), the base model's config, and the base named by path and by a digest
of its tensors; written, and read back with every field and tensor checked.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

from zoo import registry
from zoo.checkpoint.file import CheckpointError, check_finite, refuse_pickles
from zoo.checkpoint.metadata import FORMAT, FORMAT_VERSION
from zoo.checkpoint.tables import tensor_specs
from zoo.checkpoint.writer import write_safetensors
from zoo.family import ArchitectureConfig, Family
from zoo.limits import json_kind, parse_json
from zoo.lora.adapter import BIAS, A, Adapter, B, all_points, base_digest

KIND = "adapter"


@dataclass(frozen=True)
class AdapterFile:
    path: Path
    metadata: dict[str, str]
    family: Family
    config: ArchitectureConfig
    adapter: Adapter
    tensors: dict[str, np.ndarray]

    @property
    def base(self) -> dict[str, Any]:
        return json.loads(self.metadata["base"])


def write_adapter(
    path: str | Path,
    family: Family,
    config: ArchitectureConfig,
    adapter: Adapter,
    tensors: dict[str, np.ndarray],
    base: dict[str, Any],
    *,
    framework: str,
    recipe: dict | None = None,
    metrics: dict | None = None,
    vocab: str | None = None,
) -> Path:
    """The adapter alone: A, B, trained biases; ``base`` says which base it belongs to
    (``path`` or ``seed``, and ``sha256``)."""
    task_info = config.task_info() | ({"vocab": vocab} if vocab is not None else {})
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "kind": KIND,
        "architecture": family.name,
        "config": config.model_dump_json(),
        "task": config.active_task,
        "task_info": json.dumps(task_info),
        "framework": framework,
        "lora": json.dumps(
            {
                **adapter.settings,
                "points": [p.name for p in adapter.points],
                "ranks": adapter.ranks,
                "scales": adapter.scales,
                **({"lora_bias": True} if adapter.lora_bias else {}),
                **({"saved": list(adapter.saved)} if adapter.saved else {}),
            }
        ),
        "base": json.dumps(base),
        "recipe": json.dumps(recipe or {}),
        "metrics": json.dumps(metrics or {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    check_finite(path, arrays)
    return write_safetensors(path, arrays, metadata)


def is_adapter(path: str | Path) -> bool:
    try:
        with safe_open(str(path), framework="np") as handle:
            return (handle.metadata() or {}).get("kind") == KIND
    except Exception:
        return False


def read_adapter(path: str | Path) -> AdapterFile:
    """Open and check an adapter file: kind, architecture, config, the points its metadata
    names, and every tensor it holds (each one's shape, none left over, none missing); each
    problem refused in one line."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    refuse_pickles(path)
    if not is_adapter(path):
        raise CheckpointError(
            f"{path}: not a zoo LoRA adapter (kind={KIND!r}); zoo train writes one for init.lora"
        )
    tensors = load_file(str(path))
    with safe_open(str(path), framework="np") as handle:
        metadata = handle.metadata()
    family, config, adapter = _adapter_of(path, metadata)
    _check_tensors(path, family, config, adapter, tensors)
    check_finite(path, tensors)
    return AdapterFile(path, metadata, family, config, adapter, tensors)


def _damaged(path: Path, problem: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: its adapter metadata is damaged ({problem}); write the adapter again (zoo train, "
        "zoo import of its PEFT folder)"
    )


def _adapter_of(path: Path, metadata: dict[str, str]) -> tuple[Family, ArchitectureConfig, Adapter]:
    """The family, config and :class:`Adapter` an adapter file's metadata describes."""
    try:
        family = registry.get_family(metadata["architecture"])
        config = family.config.model_validate_json(metadata["config"])
    except KeyError as error:
        raise _damaged(path, f"no {error.args[0]!r}") from None
    except (ValueError, registry.UnknownArchitectureError) as error:
        raise _damaged(path, str(error).splitlines()[0]) from None
    for name in ("lora", "base"):
        if name not in metadata:
            raise _damaged(path, f"no {name!r}")
    lora = parse_json(metadata["lora"], f"{path}: its 'lora' metadata", error=CheckpointError)
    parse_json(metadata["base"], f"{path}: its 'base' metadata", error=CheckpointError)
    kinds = {"points": list, "ranks": dict, "scales": dict}
    for name, kind in kinds.items():
        if not isinstance(lora.get(name), kind):
            found = "none" if name not in lora else f"a JSON {json_kind(lora[name])}"
            want = "an array" if kind is list else "an object"
            raise _damaged(path, f"lora.{name} is {found}, not {want}")
    known = all_points(family, config)
    names = lora["points"]
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise _damaged(path, f"lora.points names {name!r}, which is no projection of its model")
        for table in ("ranks", "scales"):
            value = lora[table].get(name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise _damaged(path, f"lora.{table} has {value!r} for {name!r}, not a number")
        if int(lora["ranks"][name]) < 1 or lora["ranks"][name] != int(lora["ranks"][name]):
            raise _damaged(path, f"lora.ranks has {lora['ranks'][name]!r} for {name!r}, not a positive rank")
    saved = lora.get("saved", [])
    if not isinstance(saved, list) or not all(isinstance(n, str) for n in saved):
        raise _damaged(path, "lora.saved is not an array of tensor names")
    dropout = lora.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout < 1:
        raise _damaged(path, f"lora.dropout is {dropout!r}, not a number in [0, 1)")
    train_bias = lora.get("train_bias", "none")
    if train_bias not in ("none", "lora_only", "all"):
        raise _damaged(path, f"lora.train_bias is {train_bias!r}, not none, lora_only or all")
    adapter = Adapter(
        tuple(known[name] for name in names),
        {name: int(lora["ranks"][name]) for name in names},
        {name: float(lora["scales"][name]) for name in names},
        float(dropout),
        train_bias,
        {k: v for k, v in lora.items() if k not in ("points", "ranks", "scales", "lora_bias", "saved")},
        bool(lora.get("lora_bias", False)),
        tuple(saved),
    )
    return family, config, adapter


def _check_tensors(path: Path, family, config, adapter: Adapter, tensors: dict[str, np.ndarray]) -> None:
    """Every tensor the adapter needs, in its shape, and no other."""
    want: dict[str, tuple[int, ...]] = {}
    for point in adapter.points:
        r = adapter.ranks[point.name]
        want[f"{point.name}.{A}"] = (r, point.in_features)
        want[f"{point.name}.{B}"] = (point.out_features, r)
        if adapter.biased(point):
            want[f"{point.name}.{BIAS}"] = (point.out_features,)
    specs = tensor_specs(family.weight_table(config))
    for name in adapter.replaced_names(family, config):
        if name not in specs:
            raise _damaged(path, f"it replaces {name!r}, which its model does not hold")
        want[name] = specs[name].shape
    for name, shape in want.items():
        if name not in tensors or tuple(tensors[name].shape) != shape:
            got = list(tensors[name].shape) if name in tensors else "missing"
            raise CheckpointError(f"{path}: {name} is {got}; the adapter needs {list(shape)}")
    extra = sorted(set(tensors) - set(want))
    if extra:
        raise CheckpointError(
            f"{path}: holds {', '.join(extra[:5])}, which its adapter metadata does not name; the file "
            "is not one zoo wrote: write the adapter again"
        )


def check_base(adapter_file: AdapterFile, base_tensors: dict[str, np.ndarray], where: str) -> None:
    """Refuse a base whose tensors are not the ones the adapter was trained on."""
    found = base_digest(base_tensors)
    wanted = adapter_file.base.get("sha256")
    if found != wanted:
        raise CheckpointError(
            f"{adapter_file.path}: was trained on a base with sha256 {wanted}, but {where} has sha256 "
            f"{found}; give the adapter its own base (--base)"
        )
