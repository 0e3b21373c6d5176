"""Which projections of a model LoRA can adapt, found in the family's weight table.

Every dense matrix of the table is a point (``layers.0.self_attn.q_proj``, ``h.0.mlp.fc1``); a
fused self-attention projection (``in_proj_weight``, query, key and value stacked) is three
points, one per row block (``h.0.attn.q``, ``.k``, ``.v``), plus its ``out_proj``. So a recipe
names q, k and v separately whether the twins fuse them or not, as PEFT's targets do on a model
that keeps them apart. Pure, and part of the recipe layer: ``zoo validate`` checks the names
without importing a framework (or anything above zoo.recipe).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zoo.family import ArchitectureConfig, Family

FUSED = ("q", "k", "v")


@dataclass(frozen=True)
class Point:
    """One adaptable matrix, or one row block of a fused one."""

    name: str  # the point's name: the matrix's module path, or the fused projection's + .q/.k/.v
    weight: str  # the canonical tensor it adapts (torch layout: out x in)
    bias: str | None  # the canonical tensor of its bias, if any
    rows: tuple[int, int] | None  # the row block of ``weight`` (a fused projection), else None
    in_features: int
    out_features: int
    module: str  # torch module path: the Linear, or the fused attention module
    layer: str  # Keras layer path: the Dense, or the fused attention layer

    @property
    def fused(self) -> bool:
        return self.rows is not None

    @property
    def short(self) -> str:
        """The name without its block's index: what a recipe's ``target`` usually says."""
        return re.sub(r"^.*?\.\d+\.", "", self.name)


def points(family: Family, config: ArchitectureConfig) -> list[Point]:
    """Every adaptable point of ``config``'s model, in weight-table order."""
    found = []
    for port in family.weight_table(config):
        specs = {s.name: s for s in port.tensors}
        if port.tensors[0].name.endswith(".in_proj_weight"):  # zoo.nn.ports.self_attention
            weight, bias, out_weight, out_bias = (s.name for s in port.tensors)
            embed = specs[weight].shape[1]
            module = weight.removesuffix(".in_proj_weight")
            for i, part in enumerate(FUSED):
                rows = (i * embed, (i + 1) * embed)
                found.append(Point(f"{module}.{part}", weight, bias, rows, embed, embed, module, port.layer))
            out = out_weight.removesuffix(".weight")
            found.append(Point(out, out_weight, out_bias, None, embed, embed, out, f"{port.layer}.out_proj"))
        elif port.variables[:1] == ("kernel",) and len(port.tensors[0].shape) == 2:
            weight = port.tensors[0].name
            if not weight.endswith(".weight") or port.to_keras is None:
                continue
            out_features, in_features = port.tensors[0].shape
            bias = port.tensors[1].name if len(port.tensors) > 1 else None
            module = weight.removesuffix(".weight")
            found.append(Point(module, weight, bias, None, in_features, out_features, module, port.layer))
    return found


class TargetError(ValueError):
    """A ``init.lora.target`` name that matches nothing in the model."""


def matches(point: Point, target: str) -> bool:
    """PEFT's rule: the whole name, or its ending after a dot."""
    return point.name == target or point.name.endswith("." + target)


def select(family: Family, config: ArchitectureConfig, target: list[str] | None) -> list[Point]:
    """The points ``target`` names (the family's default where None), in table order; a name that
    matches nothing is refused with the names that would."""
    available = points(family, config)
    names = list(target) if target else list(family.lora_targets)
    valid = ", ".join(dict.fromkeys(p.short for p in available)) or "none"
    if not names:
        raise TargetError(
            f"model {config.preset or config.architecture!r} has no default LoRA targets; "
            f"set init.lora.target to some of: {valid}"
        )
    unknown = [name for name in names if not any(matches(p, name) for p in available)]
    if unknown:
        raise TargetError(
            f"init.lora.target {', '.join(map(repr, unknown))} matches no projection of model "
            f"{config.preset or config.architecture!r}; its projections are: {valid} "
            "(or a full name such as " + (available[0].name if available else "none") + ")"
        )
    return [p for p in available if any(matches(p, name) for name in names)]
