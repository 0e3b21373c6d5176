"""What each recipe precision means, defined once: one row per ``trainer.precision`` word.

A row gives everything a consumer derives from the word: the Lightning Trainer's
``precision`` string (the recipe's words are Lightning's) and the torch autocast dtype of a
mixed precision; the Keras dtype policy (``zoo.nn.keras.precision`` builds a twin under it);
the dtype the weights are stored in and the dtype the matrix products compute in; the bytes
per parameter ``zoo.peak_memory`` counts; and what ``zoo compare`` holds the twins to (the
reference precision a run's rounding is measured against, the fixed allowance, and the unit
roundoff of one optimizer update). docs/precision.md says what the mixed rule means.

Dtypes are named by strings, so importing this module imports neither torch nor TensorFlow
(``zoo validate`` reads it): a framework turns a name into its own dtype where it needs one.
It imports no zoo module, so the recipe schema can stand on it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Precision = Literal["32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"]


@dataclass(frozen=True)
class Dtype:
    """A floating dtype's facts that the table derives from: its size and its unit roundoff
    (machine epsilon: ``torch.finfo(dtype).eps``, ``numpy.finfo(dtype).eps``)."""

    name: str
    bytes: int
    epsilon: float


DTYPES: dict[str, Dtype] = {
    d.name: d
    for d in (
        Dtype("float64", 8, 2.0**-52),
        Dtype("float32", 4, 2.0**-23),
        Dtype("bfloat16", 2, 2.0**-7),
        Dtype("float16", 2, 2.0**-10),
    )
}


@dataclass(frozen=True)
class Tolerances:
    """What ``zoo compare``'s twins may differ by in the reference precision (or in float64
    itself); zoo.compare.tolerances says how a bound is built on top of it."""

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
# It is the same for float32 and float64 references (zoo.compare.tolerances says why).
REFERENCE = Tolerances(weights=0.0, forward=1e-5, gradient=1e-4, loss=1e-4, update=1e-4)


@dataclass(frozen=True)
class PrecisionMeaning:
    """One recipe precision in both frameworks. ``parameters`` is the dtype the weights are
    kept in, ``products`` the dtype the matrix products run in (they differ: a mixed
    precision); ``on_cpu`` what to use instead on a CPU (float16 has no fast CPU kernels,
    and Lightning would silently run bf16 there); ``reference`` the precision ``zoo compare``
    measures this one's rounding against (None: float64, nothing above it)."""

    word: str  # the recipe's trainer.precision
    keras_policy: str  # the Keras dtype policy (a mixed one: of the product layers only)
    parameters: str  # storage dtype
    products: str  # compute dtype of the matrix products
    reference: str | None  # zoo compare: the precision above this one
    tolerances: Tolerances  # zoo compare: the fixed allowance of the reference twins
    on_cpu: str | None = None  # None: fine on a CPU

    @property
    def lightning(self) -> str:
        """The Lightning Trainer's ``precision`` (its plugin: autocast, or a cast module)."""
        return self.word

    @property
    def mixed(self) -> bool:
        return self.parameters != self.products

    @property
    def autocast(self) -> str | None:
        """The dtype torch's autocast runs the products in (None: no autocast)."""
        return self.products if self.mixed else None

    @property
    def cast_to(self) -> str | None:
        """The dtype Lightning's "true" plugins cast the whole module to (None: float32 kept)."""
        return None if self.mixed or self.parameters == "float32" else self.parameters

    @property
    def loss_scaling(self) -> bool:
        """float16 products under float32 weights: small gradients underflow in float16
        unless the loss is scaled (torch's GradScaler, Keras' LossScaleOptimizer). bfloat16
        has float32's range, and a ``-true`` precision has no float32 weights to scale into."""
        return self.mixed and self.products == "float16"

    @property
    def bytes_per_parameter(self) -> int:
        """What the memory estimate counts per weight (a mixed precision keeps float32)."""
        return DTYPES[self.parameters].bytes

    @property
    def parameter_epsilon(self) -> float:
        """Unit roundoff of the parameter dtype: an optimizer update rounds the new weight to
        it, so one unit of it in the largest weight is rounding (zoo compare allows it)."""
        return DTYPES[self.parameters].epsilon


PRECISIONS: dict[str, PrecisionMeaning] = {
    p.word: p
    for p in (
        PrecisionMeaning("32-true", parameters="float32", products="float32",
                         keras_policy="float32", reference="64-true", tolerances=REFERENCE),
        PrecisionMeaning("64-true", parameters="float64", products="float64",
                         keras_policy="float64", reference=None, tolerances=REFERENCE),
        PrecisionMeaning("bf16-mixed", parameters="float32", products="bfloat16",
                         keras_policy="mixed_bfloat16", reference="32-true", tolerances=REFERENCE),
        PrecisionMeaning("16-mixed", parameters="float32", products="float16", on_cpu="bf16-mixed",
                         keras_policy="mixed_float16", reference="32-true", tolerances=REFERENCE),
        PrecisionMeaning("bf16-true", parameters="bfloat16", products="bfloat16",
                         keras_policy="bfloat16", reference="32-true", tolerances=REFERENCE),
        PrecisionMeaning("16-true", parameters="float16", products="float16", on_cpu="bf16-true",
                         keras_policy="float16", reference="32-true", tolerances=REFERENCE),
    )
}  # fmt: skip


def lightning_precision(precision: str) -> str:
    """The Lightning Trainer's ``precision=`` for a recipe precision."""
    return PRECISIONS[precision].lightning


def keras_policy(precision: str) -> str:
    """The Keras dtype policy name of a recipe precision."""
    return PRECISIONS[precision].keras_policy
