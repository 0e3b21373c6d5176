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


@dataclass(frozen=True)
class Bounded:
    """One checked quantity (an output, a loss, a tensor's gradient or update) of the two
    pairs of twins, and the bound the triangle inequality puts on its gap (see
    ``zoo.compare.tolerances``). Every figure is a max |difference| in absolute units;
    ``scale`` is what the relative figures divide by (1 where the check is absolute)."""

    name: str
    shape: list[int]
    gap: float  # |torch - keras| in the recipe's precision
    scale: float
    torch_rounding: float  # |torch - torch in the reference precision|; 0 without one
    keras_rounding: float  # |keras - keras in the reference precision|
    reference_gap: float | None  # |torch - keras| in the reference precision (None: no reference)
    allowance: float  # the fixed part: tolerance x scale (+ one rounding unit of the weights)

    @property
    def limit(self) -> float:
        return self.torch_rounding + self.keras_rounding + self.allowance

    @property
    def passed(self) -> bool:
        return self.gap <= self.limit

    @property
    def relative(self) -> float:
        return _ratio(self.gap, self.scale)

    @property
    def relative_limit(self) -> float:
        return _ratio(self.limit, self.scale)

    @property
    def use(self) -> float:
        """gap / limit: how much of its bound the gap uses (above 1: over it)."""
        return _ratio(self.gap, self.limit)

    def describe(self, relative: bool = True) -> str:
        value, limit = (self.relative, self.relative_limit) if relative else (self.gap, self.limit)
        kind = "relative " if relative else ""
        return f"{self.name} ({kind}{fmt(value)} {'<=' if self.passed else '>'} {fmt(limit)})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": self.shape,
            "gap": self.gap,
            "scale": self.scale,
            "relative": self.relative,
            "limit": self.limit,
            "relative_limit": self.relative_limit,
            "torch_rounding": self.torch_rounding,
            "keras_rounding": self.keras_rounding,
            "reference_gap": self.reference_gap,
            "allowance": self.allowance,
            "passed": self.passed,
        }


def _ratio(a: float, b: float) -> float:
    if a == 0:
        return 0.0
    return a / b if b > 0 else math.inf


def bounded_gaps(
    torch_side: Mapping[str, Any],
    keras_side: Mapping[str, Any],
    torch_reference: Mapping[str, Any] | None,
    keras_reference: Mapping[str, Any] | None,
    tolerance: float,
    *,
    relative: bool,
    floor_fraction: float = 0.0,
    rounding_unit: Mapping[str, float] | None = None,
) -> list[Bounded]:
    """Each name's gap and bound, worst first (by how much of its bound it uses).

    ``relative``: the tolerance is a fraction of the quantity's own max |torch value|
    (never below ``floor_fraction`` of the largest of all, see :func:`tensor_gaps`), else
    absolute. ``rounding_unit`` adds a per-name absolute allowance (an update's rounding of
    the new weight). Without a reference both rounding terms are 0.
    """
    scales = {
        n: float(np.max(np.abs(np.asarray(v, dtype=np.float64)), initial=0.0)) for n, v in torch_side.items()
    }
    floor = floor_fraction * max(scales.values(), default=0.0)
    reference = torch_reference is not None and keras_reference is not None
    found = []
    for name, value in torch_side.items():
        scale = max(scales[name], floor) if relative else 1.0
        found.append(
            Bounded(
                name,
                [int(s) for s in np.shape(value)],
                max_abs_diff(value, keras_side[name]),
                scale,
                _finite(max_abs_diff(value, torch_reference[name])) if reference else 0.0,
                _finite(max_abs_diff(keras_side[name], keras_reference[name])) if reference else 0.0,
                max_abs_diff(torch_reference[name], keras_reference[name]) if reference else None,
                tolerance * scale + (rounding_unit or {}).get(name, 0.0),
            )
        )
    return sorted(found, key=lambda g: (-g.use, -g.gap, g.name))


def _largest(value: Any) -> float:
    return float(np.max(np.abs(np.asarray(value, dtype=np.float64)), initial=0.0))


def _finite(value: float) -> float:
    """A reference run that is not finite tells nothing of rounding: it allows nothing."""
    return value if math.isfinite(value) else 0.0


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
