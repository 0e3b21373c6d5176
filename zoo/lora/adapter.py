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
from zoo.checkpoint.file import CheckpointError, check_finite, refuse_pickles, write_safetensors
from zoo.family import ArchitectureConfig, Family
from zoo.recipe.lora_targets import Point, points, select

KIND = "adapter"
A, B, BIAS = "lora_A", "lora_B", "lora_bias"


class EmbeddingPoint(Point):
    """A token (or position) embedding LoRA adapts, as PEFT's ``Embedding`` does: A is
    (rank x vocabulary), B (dim x rank), and a lookup of ids adds ``scale * A.T[ids] @ B.T``
    (``onehot(ids) @ A.T @ B.T``); merged, ``scale * (B @ A).T`` is added to the table."""


def embedding_points(family: Family, config: ArchitectureConfig) -> list[EmbeddingPoint]:
    """Every embedding table of the model (a port of one ``embeddings`` variable), as points."""
    found = []
    for port in family.weight_table(config):
        spec = port.tensors[0]
        if port.variables == ("embeddings",) and len(spec.shape) == 2 and spec.name.endswith(".weight"):
            vocab, dim = spec.shape
            module = spec.name.removesuffix(".weight")
            found.append(EmbeddingPoint(module, spec.name, None, None, vocab, dim, module, port.layer))
    return found


def all_points(family: Family, config: ArchitectureConfig) -> dict[str, Point]:
    """Projections and embeddings by point name, in weight-table order."""
    return {p.name: p for p in [*embedding_points(family, config), *points(family, config)]}


@dataclass(frozen=True)
class Adapter:
    """What the twins attach: the points, each one's rank and scale, dropout, trained biases."""

    points: tuple[Point, ...]
    ranks: dict[str, int]
    scales: dict[str, float]
    dropout: float = 0.0
    train_bias: str = "none"
    settings: dict[str, Any] = field(default_factory=dict)  # the recipe's init.lora, as written
    # PEFT's lora_bias: each projection's B has a bias (``{point}.lora_bias``), scaled with B.
    lora_bias: bool = False
    # Base tensors the adapter holds whole (PEFT's modules_to_save): they replace the base's.
    saved: tuple[str, ...] = ()

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

    def replaced_names(self, family: Family, config: ArchitectureConfig) -> list[str]:
        """The base tensors the adapter's own values replace: trained biases and saved modules
        (left out of the base's digest: the base is the rest)."""
        return list(dict.fromkeys([*self.bias_names(family, config), *self.saved]))

    def biased(self, point: Point) -> bool:
        return self.lora_bias and not isinstance(point, EmbeddingPoint)

    def tensor_names(self) -> list[str]:
        return [
            f"{p.name}.{part}" for p in self.points for part in (A, B, BIAS) if part != BIAS or self.biased(p)
        ]


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

    from zoo.checkpoint.tables import Port, TensorSpec

    def transposed(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(a.T if a.ndim == 2 else a for a in arrays)

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
        parts = (A, B)
        if adapter.biased(point):
            specs, parts = (*specs, TensorSpec(f"{name}.{BIAS}", (point.out_features,))), (A, B, BIAS)
        part = point.name.rsplit(".", 1)[-1]
        layer = f"{point.layer}.in_proj_delta.{part}" if point.fused else f"{point.layer}.lora_adapter"
        table.append(Port(specs, layer, parts, transposed, transposed))
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
        if adapter.biased(point):
            tensors[f"{point.name}.{BIAS}"] = np.zeros(point.out_features, np.float32)
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
    """The base's tensors with the adapter's own base tensors in place (trained biases, saved
    modules), then each point's ``scale * B @ A`` folded into its matrix (rows of a fused one;
    transposed into an embedding table) and ``scale * bias`` into its bias, as PEFT's
    ``merge_and_unload``: one full model, no adapter."""
    out = {name: np.array(value, dtype=value.dtype, copy=True) for name, value in base.items()}
    for name, value in tensors.items():
        if name in out:  # a trained bias, a saved module
            out[name] = np.array(value, dtype=out[name].dtype, copy=True)
    for point in adapter.points:
        a = tensors[f"{point.name}.{A}"].astype(np.float64)
        b = tensors[f"{point.name}.{B}"].astype(np.float64)
        scale = adapter.scales[point.name]
        delta = (scale * (b @ a)).astype(np.float32)
        if isinstance(point, EmbeddingPoint):
            out[point.weight] += delta.T
            continue
        start, stop = point.rows or (0, point.out_features)
        out[point.weight][start:stop] += delta
        if adapter.biased(point):
            if point.bias is None:
                raise CheckpointError(
                    f"{point.name} has no bias to fold its LoRA bias (lora_bias) into; PEFT cannot merge "
                    "it either: use the adapter unmerged"
                )
            bias = tensors[f"{point.name}.{BIAS}"].astype(np.float64)
            out[point.bias][start:stop] += (scale * bias).astype(np.float32)
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
    from zoo.checkpoint.metadata import FORMAT, FORMAT_VERSION

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
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as handle:
            return (handle.metadata() or {}).get("kind") == KIND
    except Exception:
        return False


def read_adapter(path: str | Path) -> AdapterFile:
    """Open and check an adapter file: kind, architecture, config, the points its metadata
    names, and every tensor it holds (each one's shape, none left over, none missing); each
    problem refused in one line."""
    from safetensors import safe_open
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
    from zoo.limits import json_kind, parse_json

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
    from zoo.checkpoint.tables import tensor_specs

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
