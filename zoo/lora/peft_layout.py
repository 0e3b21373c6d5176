"""Where PEFT's LoRA tensors sit in the transformers model, by zoo point; PEFT's file names.

The PEFT files themselves are written by :mod:`zoo.lora.peft_export`, read by
:mod:`zoo.lora.peft_import` (with :mod:`zoo.lora.peft_config` for ``adapter_config.json``).

PEFT names an adapter by the transformers module it adapts (``transformer.h.0.attn.c_attn``);
zoo by its point (``h.0.attn.q``). Which module holds which point, and in which rows and
columns, is not written twice here: it is read off the family's own ``hf`` format, by sending
probe tensors through it (each point's rows numbered, then its columns, then its id) and
looking where the numbers land. A transformers module that holds several zoo points (GPT-2's
fused ``c_attn`` holds q, k and v) gets one PEFT adapter of their summed rank: A stacked, B
block-diagonal, its rank and alpha in ``rank_pattern``/``alpha_pattern``; read back, each point
takes the module's A and its own rows of B. Both give the same ``W x + scale B A x`` as zoo's.

Besides plain LoRA on projections, what PEFT users save is read and written exactly as PEFT
computes it: LoRA on embeddings (``lora_embedding_A/B``), ``lora_bias`` (B's bias, scaled with
B), and ``modules_to_save`` (whole copies of base modules, which replace the base's). Every
tensor of an adapter file is used, or the import is refused naming it; ``adapter_config.json``
is read by a pydantic model, each problem one line naming the field. What zoo does not compute
(DoRA, other tuners, layer replication...) is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo.checkpoint.tables import tensor_specs
from zoo.family import ArchitectureConfig, Family
from zoo.lora.adapter import EmbeddingPoint, embedding_points
from zoo.recipe.lora_targets import points

WEIGHTS, CONFIG = "adapter_model.safetensors", "adapter_config.json"
PREFIX = "base_model.model."


@dataclass(frozen=True)
class Module:
    """A transformers module's matrix, as zoo points: along its output axis, which point
    (None: no point) and which of that point's rows; along its input axis, which column."""

    name: str
    point_of_row: list[str | None]
    row: np.ndarray
    column: np.ndarray
    conv1d: bool  # stored [in, out] (transformers' Conv1D): PEFT's fan_in_fan_out

    def points(self) -> list[str]:
        return list(dict.fromkeys(p for p in self.point_of_row if p is not None))


def modules(family: Family, config: ArchitectureConfig) -> dict[str, Module]:
    """Every transformers module that holds a zoo point, by module name."""
    fmt = family.format("hf")
    specs = tensor_specs(family.weight_table(config))
    every = points(family, config)
    ids = {p.name: i + 1 for i, p in enumerate(every)}

    def probe(kind: str) -> dict[str, np.ndarray]:
        tensors = {n: np.zeros(s.shape, np.float32) for n, s in specs.items() if s.dtype == "float32"}
        tensors |= {n: np.zeros(s.shape, s.dtype) for n, s in specs.items() if s.dtype != "float32"}
        for p in every:
            start, stop = p.rows or (0, p.out_features)
            block = tensors[p.weight][start:stop]
            if kind == "id":
                block[...] = ids[p.name]
            elif kind == "row":
                block[...] = np.arange(1, stop - start + 1, dtype=np.float32)[:, None]
            else:
                block[...] = np.arange(1, p.in_features + 1, dtype=np.float32)[None, :]
        return fmt.write(config, tensors)[0]

    by_id, rows, columns = probe("id"), probe("row"), probe("column")
    names = {i: name for name, i in ids.items()}
    found = {}
    for key, value in by_id.items():
        value = np.asarray(value)
        if value.ndim != 2 or not key.endswith(".weight") or not value.any():
            continue
        row = np.asarray(rows[key])
        conv1d = bool(value.shape[0] > 1 and np.all(row[0] == row[-1]) and value.shape[1] > 1)
        if conv1d:  # [in, out]: look at it as (out, in)
            value, row, column = value.T, row.T, np.asarray(columns[key]).T
        else:
            column = np.asarray(columns[key])
        first = int(np.flatnonzero(value[:, 0])[0])
        found[key.removesuffix(".weight")] = Module(
            key.removesuffix(".weight"),
            [names.get(int(i)) for i in value[:, 0]],
            row[:, 0].astype(np.int64) - 1,
            column[first].astype(np.int64) - 1,
            conv1d,
        )
    return found


def embedding_modules(family: Family, config: ArchitectureConfig) -> dict[str, EmbeddingPoint]:
    """Every transformers embedding module, by module name, with the zoo embedding it holds
    (the same table, unpermuted: found by filling each with its own number)."""
    fmt = family.format("hf")
    specs = tensor_specs(family.weight_table(config))
    tables = embedding_points(family, config)
    tensors = {n: np.zeros(s.shape, s.dtype) for n, s in specs.items()}
    for i, point in enumerate(tables):
        tensors[point.weight] = np.full(tensors[point.weight].shape, i + 1, np.float32)
    found = {}
    for key, value in fmt.write(config, tensors)[0].items():
        value = np.asarray(value)
        if not key.endswith(".weight") or value.ndim != 2 or not value.any():
            continue
        ids = np.unique(value)
        if len(ids) == 1 and 1 <= ids[0] <= len(tables):
            point = tables[int(ids[0]) - 1]
            if value.shape == (point.in_features, point.out_features):
                found[key.removesuffix(".weight")] = point
    return found


def peft_scale(alpha: float, rank: int, rslora: bool) -> float:
    """PEFT's scaling of a module's adapter: ``alpha / rank`` (``alpha / sqrt(rank)`` under rsLoRA)."""
    return alpha / (rank**0.5 if rslora else rank)
