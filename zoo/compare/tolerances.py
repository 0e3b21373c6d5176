"""How close the twins must be, by precision: what turns a measured gap into PASS or DIFFERS.

float32 bounds are what identical arithmetic in a different order costs (the twins copy
weights exactly, so anything above them is a real difference: a wrong layout, a default
that differs, an optimizer that computes something else). Attention sums more terms in a
different order per step, so the transformer's training bound is looser. Low-precision
runs round every activation to 8 (bf16) or 11 (fp16) mantissa bits, and the two
frameworks choose differently which ops stay in float32, so their bounds only catch
gross errors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

LOW_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed", "16-true")


@dataclass(frozen=True)
class Tolerances:
    weights: float  # max |diff| of any tensor read back from Keras right after the copy
    forward: float  # max |diff| of the outputs (logits), train and eval mode
    gradient: float  # max relative error of any tensor's gradient
    loss: float  # |loss gap| at every training step

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def tolerances_for(precision: str, family: str) -> Tolerances:
    """Bounds for a recipe's ``trainer.precision`` and model family (``config.architecture``)."""
    if precision in LOW_PRECISIONS:
        return Tolerances(weights=0.0, forward=5e-2, gradient=1e-1, loss=1e-1)
    loss = 1e-3 if family == "transformer" else 1e-4
    return Tolerances(weights=0.0, forward=1e-5, gradient=1e-4, loss=loss)
