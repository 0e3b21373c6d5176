"""What a comparison finds: per-tensor gaps and one verdict per section, with its reason.

Plain dataclasses of floats, strings and lists, so the whole report is one
``dataclasses.asdict`` away from JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PASS, DIFFERS = "PASS", "DIFFERS"


@dataclass(frozen=True)
class TensorGap:
    """How far one canonical tensor (or its gradient) is between the twins."""

    name: str
    shape: list[int]
    max_abs_diff: float
    scale: float  # max |value| of the torch tensor (or the guard floor, see tensor_gaps)
    relative: float  # max_abs_diff / scale

    def describe(self) -> str:
        return f"{self.name} (max |diff| {fmt(self.max_abs_diff)}, relative {fmt(self.relative)})"


@dataclass
class SectionResult:
    """One parity section: what was measured, against which bound, and why it passed or not."""

    name: str
    measure: str  # what ``value`` is, in words
    value: float
    tolerance: float
    passed: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return PASS if self.passed else DIFFERS

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "measure": self.measure,
            "value": self.value,
            "tolerance": self.tolerance,
            **self.details,
        }


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest |a - b| in float64; a NaN or infinity anywhere counts as an infinite gap."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a64.shape != b64.shape:
        return math.inf
    if a64.size == 0:
        return 0.0
    diff = np.abs(a64 - b64)
    return float(diff.max()) if np.all(np.isfinite(diff)) else math.inf


def tensor_gaps(
    reference: Mapping[str, np.ndarray],
    other: Mapping[str, np.ndarray],
    floor_fraction: float = 0.0,
) -> list[TensorGap]:
    """Per-tensor gaps of ``other`` from ``reference`` (the torch side), worst relative first.

    The relative error divides by the tensor's own max |value|. A tensor that is zero up to
    rounding (the gradient of an attention key bias is exactly zero in exact arithmetic)
    would turn float noise into a relative error near 1, so the scale never drops below
    ``floor_fraction`` x the largest max |value| of all tensors; a tensor that is exactly
    zero on both sides has relative error 0.
    """
    scales = {
        n: float(np.max(np.abs(np.asarray(v, dtype=np.float64)), initial=0.0)) for n, v in reference.items()
    }
    floor = floor_fraction * max(scales.values(), default=0.0)
    gaps = []
    for name, value in reference.items():
        diff = max_abs_diff(value, other[name]) if name in other else math.inf
        scale = max(scales[name], floor)
        if diff == 0:
            relative = 0.0
        elif scale > 0:
            relative = diff / scale
        else:
            relative = math.inf
        shape = [int(s) for s in np.shape(value)]
        gaps.append(TensorGap(name, shape, diff, scale, relative))
    return sorted(gaps, key=lambda g: (-g.relative, -g.max_abs_diff, g.name))


def fmt(value: float | None) -> str:
    """Compact scientific notation for gaps: ``0``, ``3.1e-07``, ``inf``."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.1e}"


def json_ready(value: Any) -> Any:
    """Replace NaN and infinities (not JSON) by their names, recursively; numpy scalars to Python."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
