"""The training section: both twins through their real trainers on the same batches.

Training runs each twin through its real trainer (:mod:`zoo.compare.steps`): the torch
twin as the LightningModule ``zoo train`` fits, in Lightning's Trainer; the Keras twin as
``fit`` compiles it, one ``train_on_batch`` per batch; both on their pipelines' batches.

Training is chaotic, so a loss gap beyond its bound is not yet a verdict: the run is
re-synchronised (``zoo.compare.resync``) at its first step over the bound and at fixed
points along it, and one step from the torch twin's state decides. If every such step
agrees, the drift is amplified rounding; if one does not, the twins compute something
different there, and the report names the step and the tensor.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from zoo.compare.parity import gap_rows, reference_name
from zoo.compare.results import SectionResult, fmt, tensor_gaps
from zoo.compare.resync import Checker, PointCheck, release_memory
from zoo.compare.steps import Batch, keras_losses, lightning_losses
from zoo.compare.tolerances import Tolerances
from zoo.compare.transfer import Snapshot, snapshot
from zoo.compare.twins import Twins

RESYNC_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # besides step 1 and the first step over the bound


def resync_steps(steps: int) -> list[int]:
    """Step 1 and fixed points along the run (a quarter, half, three quarters, the end)."""
    return sorted({1, *(max(1, round(steps * f)) for f in RESYNC_FRACTIONS)})


def check_training(
    pair: Twins, checker: Checker, batches: list[Batch], table: np.ndarray, tolerances: Tolerances
) -> SectionResult:
    """``len(batches)`` optimizer steps in each framework's real training path on the same
    batches at the same rates (:mod:`zoo.compare.steps`); the loss of every step (before
    its update) and the tensors at the end.

    The reference pair trains first on the same batches: each framework's distance from
    its own reference run is its rounding, and together with the fixed allowance they
    bound the loss gap at every step. Then the recipe's Keras twin, then its torch twin,
    whose state is kept at step 1, at fixed points and at the first step over the bound;
    from each, one step of both twins is checked (:mod:`zoo.compare.resync`).
    """
    reference = checker.reference
    steps = len(batches)
    checker.forget_updaters()
    floors = None
    if reference is not None:
        torch_floor = lightning_losses(reference, table, steps)
        release_memory(reference)  # Lightning's Trainer holds its optimizer's moments in a reference cycle
        floors = {"torch": torch_floor, "keras": keras_losses(reference, table, batches)}
        reference.reset()
        reference.torch_model.zero_grad(set_to_none=True)
        release_memory(reference)
    keras = keras_losses(pair, table, batches)
    release_memory(pair)
    with tempfile.TemporaryDirectory(prefix="zoo-compare-") as scratch:
        watch = Watch(pair, keras, floors, tolerances, set(resync_steps(steps)), Path(scratch))
        torch = lightning_losses(pair, table, steps, watch)
        if len(torch) != steps:
            raise RuntimeError(f"Lightning ran {len(torch)} of the {steps} steps compare asked for")
        final = tensor_gaps(pair.torch_state(), pair.keras_state())
        final.sort(key=lambda g: (-g.max_abs_diff, g.name))
        pair.reset()
        pair.torch_model.zero_grad(set_to_none=True)  # Lightning leaves the last step's gradients
        release_memory(pair)
        points = [checker.check(s, batches[s - 1], watch.kept[s]) for s in sorted(watch.kept)]
    return _training_section(torch, keras, floors, watch.first, points, final, table, tolerances, checker)


class Watch:
    """Keeps the torch twin's state before the steps re-synchronisation will check: the
    fixed ones, and every step until the first whose loss gap is over its bound (that one
    is kept). Lightning calls it around each step; the Keras losses are known by then."""

    def __init__(self, pair: Twins, keras: np.ndarray, floors, tolerances: Tolerances, fixed: set[int],
                 root: Path):  # fmt: skip
        self.pair, self.keras, self.floors, self.tolerances = pair, keras, floors, tolerances
        self.fixed, self.root = fixed, root
        self.kept: dict[int, Snapshot] = {}
        self.first: int | None = None
        self.state: Snapshot | None = None

    def before(self, step: int, optimizer: Any) -> None:
        self.state = None
        if self.first is None or step in self.fixed:
            # Until a step goes over its bound, the state before each step is a candidate.
            where = self.root / (f"step-{step}" if step in self.fixed else "candidate")
            self.state = snapshot(self.pair, optimizer, step, where)

    def after(self, step: int, loss: float) -> None:
        within, _ = _step_limit(loss, float(self.keras[step - 1]), self.floors, step - 1, self.tolerances)
        if self.first is None and not within:
            self.first = step
            if step not in self.fixed:
                self.state = self.state.move(self.root / f"step-{step}")
            self.kept[step] = self.state
        if step in self.fixed:
            self.kept[step] = self.state


def _step_limit(torch_loss, keras_loss, floors, i, tolerances) -> tuple[bool, float]:
    """(within the bound, the bound) at step ``i + 1``."""
    limit = tolerances.loss
    if floors is not None:
        limit += _finite_gap(torch_loss, floors["torch"][i]) + _finite_gap(keras_loss, floors["keras"][i])
    gap = _gap(torch_loss, keras_loss)
    return gap <= limit, limit


def _gap(a: float, b: float) -> float:
    return abs(a - b) if np.isfinite(a) and np.isfinite(b) else float("inf")


def _finite_gap(a: float, b: float) -> float:
    """A rounding term; a reference run that is not finite tells nothing, so it allows nothing."""
    gap = _gap(a, b)
    return gap if np.isfinite(gap) else 0.0


def loss_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| per step; a step where either loss is not finite is an infinite gap."""
    finite = np.isfinite(a) & np.isfinite(b)
    return np.where(finite, np.abs(a - b), np.inf)


def _training_section(
    torch_losses, keras_losses, floors, first, points, final, table, tolerances, checker
) -> SectionResult:
    reference = reference_name(checker)
    gap = loss_gap(torch_losses, keras_losses)
    steps = len(gap)
    limits = np.array(
        [
            _step_limit(t, k, floors, i, tolerances)[1]
            for i, (t, k) in enumerate(zip(torch_losses, keras_losses, strict=True))
        ]
    )
    worst_step = int(np.argmax(gap)) + 1
    value = float(gap.max())
    worst_tensor = final[0] if final else None
    drift = _drift(gap, limits, first, worst_step)
    passed, reason = _training_verdict(torch_losses, keras_losses, drift, first, points, worst_tensor)
    details = {
        "steps": steps,
        "max_gap_step": worst_step,
        "first_step_over_tolerance": first,
        "amplified_rounding": bool(passed and first is not None),
        "reference": reference,
        "final_loss": {"torch": float(torch_losses[-1]), "keras": float(keras_losses[-1])},
        "loss": {"torch": torch_losses.tolist(), "keras": keras_losses.tolist()},
        "gap": gap.tolist(),
        "limit": limits.tolist(),
        "lr": [float(table[min(i, len(table) - 1)]) for i in range(steps)],
        "noise_floor": _noise_floor(torch_losses, keras_losses, floors, reference),
        "resync": [p.as_dict() for p in points],
        "resync_summary": [_point_summary(p) for p in points],
        "final_weights_worst_tensor": worst_tensor.name if worst_tensor else None,
        "final_weights": gap_rows(final),
    }
    return SectionResult(
        "training",
        f"max |loss gap| over {steps} steps",
        value,
        float(limits[worst_step - 1]),
        passed,
        reason,
        details,
    )


def _drift(gap: np.ndarray, limits: np.ndarray, first: int | None, worst_step: int) -> str:
    """The loss gap in words: its largest value and step, and the step from which it is over its
    rounding bound (both figures there, with more digits where three would read equal)."""
    drift = f"max |loss gap| {fmt(float(gap.max()))} at step {worst_step} of {len(gap)}"
    if first is not None:
        over, bound = float(gap[first - 1]), float(limits[first - 1])
        figures = (fmt(over), fmt(bound)) if fmt(over) != fmt(bound) else (f"{over:.3e}", f"{bound:.3e}")
        drift += f", over its rounding bound from step {first} ({figures[0]} > {figures[1]} there)"
    return drift


def _training_verdict(
    torch_losses, keras_losses, drift: str, first: int | None, points: list[PointCheck], worst_tensor
) -> tuple[bool, str]:
    """Passed, and why: a loss that stops being finite fails; so does a re-synchronised step
    where the twins differ; a gap over its bound whose re-synchronised steps agree is amplified
    rounding, which passes."""
    steps = len(torch_losses)
    failed = [p for p in points if not p.passed]
    finite = np.isfinite(torch_losses) & np.isfinite(keras_losses)
    where = ", ".join(str(p.step) for p in points)
    agree = _agreement(points)
    if not np.all(finite):
        bad = int(np.nonzero(~finite)[0][0]) + 1
        side = "torch" if not np.isfinite(torch_losses[bad - 1]) else "keras"
        return False, f"the {side} loss is not finite from step {bad} of {steps}"
    if failed:
        worst = failed[0]
        reason = (
            f"{drift}; from torch's state at step {worst.step} the twins differ: {worst.describe()}"
            f" (re-synchronised at steps {where}; {len(failed)} differ)"
        )
        if worst_tensor is not None:
            reason += f"; at the end {worst_tensor.name} differs most ({fmt(worst_tensor.max_abs_diff)})"
        return False, reason
    if first is None:
        return True, (
            f"{drift} <= its bound; from re-synchronised states at steps {where} the twins agree ({agree})"
        )
    return True, (
        f"{drift}, but from re-synchronised states at steps {where} the twins agree ({agree}): "
        "amplified rounding (chaotic training), not a different computation"
    )


CHECK_LABELS = {"forward": "outputs", "loss": "loss", "gradients": "gradients", "update": "one update"}


def _agreement(points: list[PointCheck]) -> str:
    """The worst of each check over the re-synchronised steps, in the check's own units."""
    parts = []
    for kind, label in (
        ("forward", "outputs"),
        ("loss", "loss"),
        ("gradients", "gradients"),
        ("update", "one update"),
    ):
        gaps = [g for p in points for g in p.checks().get(kind, [])]
        if not gaps:
            continue
        relative = kind in ("gradients", "update")
        worst = max(gaps, key=lambda g: g.relative if relative else g.gap)
        value = worst.relative if relative else worst.gap
        parts.append(f"{label} {fmt(value)}{' relative' if relative else ''}")
    skipped = {p.update_skipped for p in points if p.update_skipped}
    if skipped:
        parts.append(f"no update compared: {'; '.join(sorted(skipped))}")
    return ", ".join(parts)


def _point_summary(point: PointCheck) -> dict[str, Any]:
    """One row of the report's re-sync table: per check, the worst figure and its bound."""
    row: dict[str, Any] = {"step": point.step, "passed": point.passed, "losses": point.losses}
    for kind, gaps in point.checks().items():
        worst = gaps[0] if gaps else None
        if worst is None:
            continue
        relative = kind in ("gradients", "update")
        row[kind] = {
            "name": worst.name,
            "value": worst.relative if relative else worst.gap,
            "limit": worst.relative_limit if relative else worst.limit,
            "passed": all(g.passed for g in gaps),
        }
    if point.update_skipped:
        row["update_skipped"] = point.update_skipped
    return row


def _noise_floor(torch_losses, keras_losses, floors, reference) -> dict[str, Any] | None:
    """How far each twin is from its own reference-precision run, and the reference twins
    from each other."""
    if floors is None:
        return None
    torch_gap = loss_gap(torch_losses, floors["torch"])
    keras_gap = loss_gap(keras_losses, floors["keras"])
    reference_gap = loss_gap(floors["torch"], floors["keras"])
    return {
        "reference": reference,
        "loss": {"torch": floors["torch"].tolist(), "keras": floors["keras"].tolist()},
        "torch_gap": torch_gap.tolist(),
        "keras_gap": keras_gap.tolist(),
        "reference_gap": reference_gap.tolist(),
        "torch_max_gap": float(torch_gap.max()),
        "keras_max_gap": float(keras_gap.max()),
        "reference_max_gap": float(reference_gap.max()),
        "verdict": (
            f"torch is up to {fmt(float(torch_gap.max()))} from torch in {reference}, keras up to "
            f"{fmt(float(keras_gap.max()))} from keras in {reference}; the {reference} twins are up to "
            f"{fmt(float(reference_gap.max()))} apart"
        ),
    }
