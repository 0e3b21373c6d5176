"""A LoRA adapter as both twins hold it, and as zoo writes it: framework-neutral numpy.

An adapter is, per point (zoo.recipe.lora_targets), A (rank x in) and B (out x rank) in the canonical
(torch) layout, a scale, and the base biases it trains (``train_bias``). Its file is a zoo
safetensors of kind ``adapter``: those tensors, the base model's config, and the base named by
path and by a digest of its tensors, so that it is never put on another base by mistake.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo import registry
from zoo.family import ArchitectureConfig, Family
from zoo.recipe.lora_targets import Point, select
from zoo.safetensors_io import CheckpointError, check_finite, refuse_pickles, write_safetensors

KIND = "adapter"
A, B = "lora_A", "lora_B"


@dataclass(frozen=True)
class Adapter:
    """What the twins attach: the points, each one's rank and scale, dropout, trained biases."""

    points: tuple[Point, ...]
    ranks: dict[str, int]
    scales: dict[str, float]
    dropout: float = 0.0
    train_bias: str = "none"
    settings: dict[str, Any] = field(default_factory=dict)  # the recipe's init.lora, as written

    @classmethod
    def from_recipe(cls, family: Family, config: ArchitectureConfig, lora) -> Adapter:
        chosen = tuple(select(family, config, lora.target))
        return cls(
            chosen,
            {p.name: lora.rank for p in chosen},
            {p.name: lora.scale() for p in chosen},
            lora.dropout,
            lora.train_bias,
            lora.model_dump(mode="json"),
        )

    def bias_names(self, family: Family, config: ArchitectureConfig) -> list[str]:
        """The base tensors that train with the adapter: PEFT's ``bias`` option, on canonical names."""
        if self.train_bias == "none":
            return []
        if self.train_bias == "lora_only":
            return list(dict.fromkeys(p.bias for p in self.points if p.bias))
        return [
            s.name
            for port in family.weight_table(config)
            for s in port.tensors
            if s.trainable and s.name.endswith("bias")
        ]

    def tensor_names(self) -> list[str]:
        return [f"{p.name}.{part}" for p in self.points for part in (A, B)]


def key(point_name: str) -> str:
    """The torch twin's module key of a point's adapter (module names may not contain dots)."""
    return point_name.replace(".", "__")


TORCH_PREFIX = "lora.adapters."  # the torch twin's state_dict names: lora.adapters.<key>.lora_A


def ports(adapter: Adapter, frozen: list, trained: set[str]) -> list:
    """A weight table for an adapted twin: ``frozen`` (the family's table) with only ``trained``
    tensors trainable, then one port per adapter, torch ``lora.adapters.<key>.lora_A/B`` <->
    the Keras adapter's ``lora_A``/``lora_B`` (transposed), so tools built on tables (zoo compare)
    see the adapters as tensors of the model."""
    from dataclasses import replace

    from zoo.weights import Port, TensorSpec

    def transposed(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(a.T for a in arrays)

    table = [
        replace(port, tensors=tuple(replace(s, trainable=s.name in trained) for s in port.tensors))
        for port in frozen
    ]
    for point in adapter.points:
        r, name = adapter.ranks[point.name], TORCH_PREFIX + key(point.name)
        specs = (
            TensorSpec(f"{name}.{A}", (r, point.in_features)),
            TensorSpec(f"{name}.{B}", (point.out_features, r)),
        )
        part = point.name.rsplit(".", 1)[1]
        layer = f"{point.layer}.in_proj_delta.{part}" if point.fused else f"{point.layer}.lora_adapter"
        table.append(Port(specs, layer, (A, B), transposed, transposed))
    return table


def initial_tensors(adapter: Adapter, seed: int) -> dict[str, np.ndarray]:
    """A and B as PEFT's ``reset_lora_parameters`` draws them: A Kaiming-uniform (a = sqrt(5)),
    B zero, A by A in point order from a torch generator of ``seed``. Both twins start from
    these arrays (the Keras twin loads them), so one seed is one start in either framework."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for point in adapter.points:
        a = torch.empty(adapter.ranks[point.name], point.in_features)
        torch.nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=generator)
        tensors[f"{point.name}.{A}"] = a.numpy()
        tensors[f"{point.name}.{B}"] = np.zeros((point.out_features, adapter.ranks[point.name]), np.float32)
    return tensors


def base_digest(tensors: dict[str, np.ndarray], exclude: set[str] = frozenset()) -> str:
    """sha256 over a base's tensors (names, dtypes, shapes, float32 bytes), in name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        if name in exclude:
            continue
        array = np.asarray(tensors[name])
        array = np.ascontiguousarray(array.astype(np.float32) if array.dtype.kind == "f" else array)
        digest.update(f"{name}|{array.dtype.str}|{array.shape}\n".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def merged(base: dict[str, np.ndarray], adapter: Adapter, tensors: dict[str, np.ndarray]) -> dict:
    """The base's tensors with each point's ``scale * B @ A`` folded into its matrix (rows of a
    fused one) and the adapter's trained biases in place: one full model, no adapter."""
    out = {name: np.array(value, dtype=value.dtype, copy=True) for name, value in base.items()}
    for point in adapter.points:
        a = tensors[f"{point.name}.{A}"].astype(np.float64)
        b = tensors[f"{point.name}.{B}"].astype(np.float64)
        delta = (adapter.scales[point.name] * (b @ a)).astype(np.float32)
        start, stop = point.rows or (0, point.out_features)
        out[point.weight][start:stop] += delta
    for name, value in tensors.items():
        if name in out:  # a trained bias
            out[name] = np.asarray(value, dtype=out[name].dtype)
    return out


# ------------------------------------------------------------------------------ file


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
    from zoo.checkpoint import FORMAT, FORMAT_VERSION

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
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as handle:
            return (handle.metadata() or {}).get("kind") == KIND
    except Exception:
        return False


def read_adapter(path: str | Path) -> AdapterFile:
    """Open and check an adapter file: kind, architecture, config, every point's A and B."""
    from safetensors.numpy import load_file

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    refuse_pickles(path)
    if not is_adapter(path):
        raise CheckpointError(
            f"{path}: not a zoo LoRA adapter (kind={KIND!r}); zoo train writes one for init.lora"
        )
    tensors = load_file(str(path))
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as handle:
        metadata = handle.metadata()
    try:
        family = registry.get_family(metadata["architecture"])
        config = family.config.model_validate_json(metadata["config"])
        lora = json.loads(metadata["lora"])
        json.loads(metadata["base"])
    except (KeyError, ValueError, registry.UnknownArchitectureError) as error:
        raise CheckpointError(f"{path}: its adapter metadata is damaged ({error})") from None
    by_name = {p.name: p for p in select(family, config, lora["points"])}
    points = tuple(by_name[name] for name in lora["points"])
    ranks = {k: int(v) for k, v in lora["ranks"].items()}
    adapter = Adapter(
        points,
        ranks,
        {k: float(v) for k, v in lora["scales"].items()},
        float(lora.get("dropout", 0.0)),
        lora.get("train_bias", "none"),
        {k: v for k, v in lora.items() if k not in ("points", "ranks", "scales")},
    )
    for point in points:
        r = ranks[point.name]
        want = {A: (r, point.in_features), B: (point.out_features, r)}
        for part, shape in want.items():
            name = f"{point.name}.{part}"
            if name not in tensors or tensors[name].shape != shape:
                got = list(tensors[name].shape) if name in tensors else "missing"
                raise CheckpointError(f"{path}: {name} is {got}; the adapter needs {list(shape)}")
    check_finite(path, tensors)
    return AdapterFile(path, metadata, family, config, adapter, tensors)


def check_base(adapter_file: AdapterFile, base_tensors: dict[str, np.ndarray], where: str) -> None:
    """Refuse a base whose tensors are not the ones the adapter was trained on."""
    found = base_digest(base_tensors)
    wanted = adapter_file.base.get("sha256")
    if found != wanted:
        raise CheckpointError(
            f"{adapter_file.path}: was trained on a base with sha256 {wanted}, but {where} has sha256 "
            f"{found}; give the adapter its own base (--base)"
        )
