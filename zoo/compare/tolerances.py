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
float32 (the Keras attention's ``ops.cast(head_dim**-0.5, "float64")`` converts the Python
float through float32 first, 3e-9 off), so float64 is not held to float64 resolution,
only to what float32 parity already promises.
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


# Measured on every shipped recipe, 100 steps, oneDNN on and off (bench/compare_all.py),
# as the reference twins' own gap at the first batch and at every re-synchronised step:
#   float64 twins (reference of 32-true): outputs <= 1e-7, gradients <= 6e-8 relative,
#     one update <= 3e-12, losses over the run <= 1.3e-8; all but the transformers agree
#     to 1e-13 or better, the transformers keep the float32 attention scale (above).
#   float32 twins (reference of bf16-mixed): outputs <= 6e-6, gradients <= 2e-4 relative
#     (resnet-8's BatchNorm at batch 5), one update <= 1.5e-4 relative (one unit in the
#     last place of the weight, allowed on top); losses over a run drift up to 9e-3 (a
#     max-pool tie under oneDNN, amplified by Adam): that is what re-synchronising is for.
# The allowance is far below a real difference seen so far (a bias 1% off: 8.5e-4 in a
# transformer's outputs, 1e-2 relative in its gradient) and above the float64 twins' gaps.
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
