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
float64 (each precision's row in ``zoo.precision``'s table gives its allowance). A gap
beyond the bound therefore means the twins in the reference precision already differ: a
wrong layout, a default that differs, an optimizer that computes
something else. A float64 run has no reference; it is held to the fixed allowance alone.

The allowance is the same for float32 and float64: a float64 twin may keep a constant in
float32 (the Keras attention's ``ops.cast(head_dim**-0.5, "float64")`` converts the Python
float through float32 first, 3e-9 off), so float64 is not held to float64 resolution,
only to what float32 parity already promises.
"""

from __future__ import annotations

# Tolerances, their values and each precision's reference are zoo.precision's table; named
# here too, where compare reads them.
from zoo.precision import PRECISIONS
from zoo.precision import REFERENCE as REFERENCE
from zoo.precision import Tolerances as Tolerances


def tolerances_for(precision: str) -> Tolerances:
    """The fixed allowance of a recipe's ``trainer.precision``: that of its reference
    precision (the triangle bound adds the measured rounding of P on top). The same for
    every reference precision, see the module docstring."""
    return PRECISIONS[precision].tolerances


def parameter_epsilon(precision: str) -> float:
    """Unit roundoff of ``precision``'s parameter dtype: an optimizer update rounds the new
    weight to it, so one unit of it in the largest weight is rounding."""
    return PRECISIONS[precision].parameter_epsilon


def reference_precision(precision: str) -> str | None:
    """What a run's rounding is measured against: float32 runs against float64, low
    precisions against float32; float64 has nothing above it here."""
    return PRECISIONS[precision].reference
