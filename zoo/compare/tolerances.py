"""How close the twins must be: measured rounding plus a fixed allowance for the reference.

No bound here is keyed by a model family. Every quantity compare checks (an output, a
loss, a tensor's gradient, one optimizer update) is measured four times: by each twin in
the recipe's precision P, and by each twin again in a reference precision R above it
(float64 for float32 runs, float32 for bf16/fp16 runs), from the same tensors on the same
batch. With ``t``/``k`` the torch/Keras values and ``|.|`` the max |difference|, the
triangle inequality gives, element by element and so for the max,

    |t_P - k_P|  <=  |t_P - t_R|  +  |t_R - k_R|  +  |k_R - k_P|

The outer terms are each framework's own rounding in P (its distance from its own run in
R), measured, not guessed; so the twins in P may be as far apart as both rounding terms
together plus what the twins may differ by in R. Only that last term is a fixed number:
:class:`Tolerances`, what the same arithmetic in a different order costs in float32 or
float64. A gap beyond the bound therefore means the twins in the reference precision
already differ: a wrong layout, a default that differs, an optimizer that computes
something else. A float64 run has no reference; it is held to the fixed allowance alone.

The allowance is the same for float32 and float64: a float64 twin may keep a constant in
float32 (Keras' exact GELU is 5e-9 from torch's at float64), so float64 is not held to
float64 resolution, only to what float32 parity already promises.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

LOW_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed", "16-true")

# Unit roundoff (machine epsilon) of the parameter dtype of each precision: an optimizer
# update rounds the new weight to it, so one unit of it in the largest weight is rounding.
PARAMETER_EPSILON = {
    "64-true": float(np.finfo(np.float64).eps),
    "bf16-true": 2.0**-7,
    "16-true": float(np.finfo(np.float16).eps),
}
FLOAT32_EPSILON = float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class Tolerances:
    """What the twins may differ by in the reference precision (or in float64 itself)."""

    weights: float  # max |diff| of any tensor read back from Keras right after the copy
    forward: float  # max |diff| of the outputs (logits), train and eval mode
    gradient: float  # max |diff| of a tensor's gradient, relative to that tensor's largest gradient
    loss: float  # |loss gap| at one step
    update: float  # max |diff| after one optimizer update, relative to the tensor's largest update

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


# Measured on the shipped recipes (float32 and float64 twins; bench/out/compare_summary.md):
# outputs 2e-8, gradients 6e-7 relative, losses 1e-8 over 100 steps where nothing amplifies.
# The allowance leaves a factor of 100 or more above that and stays below any real difference
# seen so far (a bias off by 1%: 1e-3 in the outputs).
REFERENCE = Tolerances(weights=0.0, forward=1e-5, gradient=1e-4, loss=1e-4, update=1e-4)


def tolerances_for(precision: str) -> Tolerances:
    """The fixed allowance of a recipe's ``trainer.precision``: that of its reference
    precision (the triangle bound adds the measured rounding of P on top)."""
    del precision  # the same allowance for every reference precision, see the module docstring
    return REFERENCE


def parameter_epsilon(precision: str) -> float:
    return PARAMETER_EPSILON.get(precision, FLOAT32_EPSILON)


def reference_precision(precision: str) -> str | None:
    """What a run's rounding is measured against: float32 runs against float64, low
    precisions against float32; float64 has nothing above it here."""
    if precision == "64-true":
        return None
    if precision in LOW_PRECISIONS:
        return "32-true"
    return "64-true"
