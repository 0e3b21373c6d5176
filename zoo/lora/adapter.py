"""A LoRA adapter as both twins hold it: framework-neutral numpy (its file is
:mod:`zoo.lora.adapter_file`'s).

An adapter is, per point (zoo.recipe.lora_targets), A (rank x in) and B (out x rank) in the canonical
(torch) layout, a scale, and the base biases it trains (``train_bias``). The base it goes on is
named by a digest of its tensors (:func:`base_digest`), so that it is never put on another base by
mistake.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.tables import Port, TensorSpec
from zoo.family import ArchitectureConfig, Family
from zoo.recipe.lora_targets import Point, points, select

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
