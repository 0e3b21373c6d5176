"""The parity sections before training: weights after the copy, forward outputs, gradients.

Every section starts from the twins' initial tensors and leaves them there (``reset``),
so the order of sections never changes a result. Two pairs of twins take part: the
recipe's precision and the reference precision (float64 for float32 runs, float32 for
bf16/fp16 runs). Each figure's bound is both frameworks' own rounding, measured against
their own reference run, plus a fixed allowance (``zoo.compare.tolerances``). The
training section is :mod:`zoo.compare.trajectory`'s.
"""

from __future__ import annotations

from typing import Any

from zoo.compare.results import Bounded, SectionResult, TensorGap, fmt, tensor_gaps
from zoo.compare.resync import Checker, PointCheck
from zoo.compare.steps import Batch
from zoo.compare.tolerances import Tolerances
from zoo.compare.twins import Twins
from zoo.precision import PRECISIONS

WORST = 10  # tensors listed per section in the report


def gap_rows(gaps: list[TensorGap], limit: int | None = WORST) -> list[dict[str, Any]]:
    return [g.__dict__ for g in (gaps if limit is None else gaps[:limit])]


# ------------------------------------------------------------------------------ weights


def check_weights(twins: Twins, tolerances: Tolerances) -> SectionResult:
    """Read every tensor back from the Keras twin right after the copy: a table whose
    ``to_keras`` and ``to_torch`` disagree, or a variable the table misses, shows here by name."""
    gaps = tensor_gaps(twins.torch_state(), twins.keras_state())
    gaps.sort(key=lambda g: (-g.max_abs_diff, g.name))
    worst = gaps[0]
    over = [g for g in gaps if g.max_abs_diff > tolerances.weights]
    if over:
        others = f" (and {len(over) - 1} more)" if len(over) > 1 else ""
        reason = (
            f"{worst.name} read back from Keras differs from torch by {fmt(worst.max_abs_diff)} "
            f"right after the copy{others}: the weight table or the Keras layer that holds it is wrong"
        )
    else:
        reason = (
            f"all {len(gaps)} tensors read back from Keras equal torch's "
            f"(max |diff| {fmt(worst.max_abs_diff)})"
        )
    return SectionResult(
        "weights",
        "max |diff| of the tensors read back after the copy",
        worst.max_abs_diff,
        tolerances.weights,
        not over,
        reason,
        {
            "worst_tensor": worst.name,
            "tensors_above_tolerance": [g.name for g in over],
            "tensors": gap_rows(gaps),
        },
    )


# ------------------------------------------------------------------- forward + gradients


def forward_and_gradients(checker: Checker, batch: Batch) -> tuple[SectionResult, SectionResult, PointCheck]:
    """Outputs in eval and train mode on one batch, and the loss gradient of every tensor,
    from the initial tensors, in both pairs of twins."""
    point = checker.check(1, batch, None)
    return _forward_section(point, batch.size, checker), _gradient_section(point, checker), point


def _bound_text(gap: Bounded, relative: bool, reference: str | None) -> str:
    """How a limit is made up, in words."""
    limit = gap.relative_limit if relative else gap.limit
    if reference is None:
        return fmt(limit)
    scale = gap.scale if relative else 1.0
    return (
        f"{fmt(limit)} (torch's own rounding {fmt(gap.torch_rounding / scale)} + keras's "
        f"{fmt(gap.keras_rounding / scale)} from their {reference} runs + {fmt(gap.allowance / scale)})"
    )


ROUNDING_RATIO = 4.0  # one framework's own rounding this many times the other's: say so


def rounding(gaps: list[Bounded], relative: bool, reference: str | None) -> tuple[dict[str, float], str]:
    """Each framework's largest own rounding over ``gaps`` (relative or absolute), and a
    remark when one rounds far more than the other: not a verdict (the bound already
    holds each to its own rounding), but where the frameworks keep different operations
    in low precision, the reader should know."""
    if reference is None or not gaps:
        return {}, ""
    found = {
        side: max(getattr(g, f"{side}_rounding") / (g.scale if relative else 1.0) for g in gaps)
        for side in ("torch", "keras")
    }
    low, high = sorted(found, key=found.get)
    if found[low] > 0 and found[high] >= ROUNDING_RATIO * found[low]:
        ratio = found[high] / found[low]
        return found, (
            f"; {high} rounds more: {ratio:.0f}x as far from its own {reference} run as {low} "
            f"({fmt(found[high])} vs {fmt(found[low])})"
        )
    return found, ""


def _forward_section(point: PointCheck, batch: int, checker: Checker) -> SectionResult:
    reference = reference_name(checker)
    modes = {g.name: g for g in point.forward}
    worst = point.forward[0]
    train, eval_ = (fmt(modes[m].gap) for m in ("train", "eval"))
    summary = f"max |diff| {train} (train), {eval_} (eval)"
    limit_text = _bound_text(worst, False, reference)
    passed = all(g.passed for g in point.forward)
    if passed:
        reason = f"{summary} <= {limit_text}"
    else:
        reason = f"{worst.name}-mode outputs differ: {summary}; {fmt(worst.gap)} > {limit_text}"
        if worst.reference_gap is not None:
            reason += f"; the {reference} twins already differ by {fmt(worst.reference_gap)}"
    own, remark = rounding(point.forward, False, reference)
    reason += remark
    details = {
        "batch_size": int(batch),
        "reference": reference,
        "own_rounding": own,
        "loss": point.loss.as_dict(),
        **{m: modes[m].as_dict() for m in ("train", "eval")},
    }
    return SectionResult(
        "forward",
        "max |diff| of the outputs on the first batch, the mode (train / eval) closest to its bound",
        worst.gap,
        worst.limit,
        passed,
        reason,
        details,
    )


def _gradient_section(point: PointCheck, checker: Checker) -> SectionResult:
    reference = reference_name(checker)
    gaps = point.gradients
    over = [g for g in gaps if not g.passed]
    worst = gaps[0] if gaps else None
    if point.missing:
        reason = f"tensors with a gradient in one framework only: {', '.join(point.missing[:5])}"
    elif over:
        more = ""
        if len(over) > 1:
            more = f"; {len(over) - 1} more above their bound: " + ", ".join(g.name for g in over[1:4])
        reason = (
            f"{worst.name} (max |diff| {fmt(worst.gap)}, relative {fmt(worst.relative)}) > "
            f"{_bound_text(worst, True, reference)}{more}"
        )
        if worst.reference_gap is not None:
            reason += f"; the {reference} twins already differ by {fmt(worst.reference_gap / worst.scale)}"
    elif worst:
        reason = (
            f"worst tensor {worst.name} (relative {fmt(worst.relative)}) <= "
            f"{_bound_text(worst, True, reference)}"
        )
    else:
        reason = "no trainable tensors"
    own, remark = rounding(gaps, True, reference)
    reason += remark
    return SectionResult(
        "gradients",
        "max relative error of a tensor's gradient (max |diff| / max |torch grad|)",
        worst.relative if worst else 0.0,
        worst.relative_limit if worst else 0.0,
        not point.missing and not over,
        reason,
        {
            "worst_tensor": worst.name if worst else None,
            "reference": reference,
            "own_rounding": own,
            "loss": {"torch": point.losses["torch"], "keras": point.losses["keras"]},
            "tensors_above_tolerance": [g.name for g in over],
            "tensors": [g.as_dict() for g in gaps],
        },
    )


def reference_name(checker: Checker) -> str | None:
    """The dtype the reference pair computes in (float64, float32), as a report names it."""
    return None if checker.reference is None else PRECISIONS[checker.reference.precision].products
