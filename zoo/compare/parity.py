"""The parity sections: weights after the copy, forward outputs, gradients, training.

Every section starts from the twins' initial tensors and leaves them there (``reset``),
so the order of sections never changes a result. Gradients of the Keras twin are mapped
into the canonical (torch) layout with the weight table's ``to_torch`` transforms: those
are pure re-layouts (transposes, reshapes, gate reorders, splits), so the function that
maps a weight maps its gradient too.

A run's own rounding is measured against a torch copy in a higher precision (float64 for
float32 runs, float32 for bf16/fp16 runs): the "noise floor". In low precision two
frameworks cannot agree better than either agrees with float32, so there a section's
bound is the larger of its tolerance and twice the floor. Float32 bounds stay fixed; the
floor only explains a training gap (rounding amplified by training, or a real difference).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.compare.results import SectionResult, TensorGap, fmt, max_abs_diff, tensor_gaps
from zoo.compare.steps import TorchStep, dense_gradients, keras_loss, torch_loss, twin_steps
from zoo.compare.tolerances import LOW_PRECISIONS, Tolerances
from zoo.compare.twins import Twins, loss_dtype, reference_model, reference_precision, torch_autocast
from zoo.weights import keras_layer

WORST = 10  # tensors listed per section in the report
# A gradient below this fraction of the largest one is float noise around zero (see tensor_gaps).
GRADIENT_FLOOR = 1e-6
FLOOR_FACTOR = 2.0  # low precision: the twins may differ by this many times torch's own rounding


def gap_rows(gaps: list[TensorGap], limit: int | None = WORST) -> list[dict[str, Any]]:
    return [g.__dict__ for g in (gaps if limit is None else gaps[:limit])]


def bound(tolerance: float, floor: float | None, precision: str) -> float:
    """The limit a low-precision section is held to: its tolerance, or twice the noise floor."""
    if floor is None or precision not in LOW_PRECISIONS:
        return tolerance
    return max(tolerance, FLOOR_FACTOR * floor)


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


def torch_pass(model, x, y, precision: str) -> dict[str, Any]:
    """Eval-mode outputs, then train-mode outputs, loss and every parameter's gradient."""
    import torch

    model.eval()
    with torch.no_grad(), torch_autocast(precision):
        evaluated = model(x).double().numpy()
    model.train()
    model.zero_grad(set_to_none=True)
    with torch_autocast(precision):
        trained = model(x)
    loss = torch_loss(trained, y, loss_dtype(precision))
    loss.backward()
    gradients = {
        name: (np.zeros(p.shape) if p.grad is None else p.grad.detach().double().numpy())
        for name, p in model.named_parameters()
    }
    return {
        "eval": evaluated,
        "train": trained.detach().double().numpy(),
        "loss": float(loss.detach()),
        "gradients": gradients,
    }


def keras_pass(twins: Twins, x, y) -> dict[str, Any]:
    import tensorflow as tf

    model = twins.keras_model
    evaluated = np.asarray(model(x, training=False)).astype(np.float64)
    with tf.GradientTape() as tape:
        trained = model(x, training=True)
        loss = keras_loss(trained, y, loss_dtype(twins.setup.precision))
    return {
        "eval": evaluated,
        "train": np.asarray(trained).astype(np.float64),
        "loss": float(loss),
        "gradients": keras_gradients(twins, tape, loss),
    }


def keras_gradients(twins: Twins, tape, loss) -> dict[str, np.ndarray]:
    """The gradient of every trainable canonical tensor, computed on the Keras twin and
    mapped into the torch layout by each port's ``to_torch``."""
    ports = []
    for port in twins.table:
        layer = keras_layer(twins.keras_model, port.layer)
        ports.append((port, [keras_layer(layer, name) for name in port.variables]))
    trainable = [v for _, variables in ports for v in variables if v.trainable]
    gradients = dense_gradients(tape.gradient(loss, trainable))
    by_variable = {id(v): g for v, g in zip(trainable, gradients, strict=True)}
    mapped: dict[str, np.ndarray] = {}
    for port, variables in ports:
        arrays = []
        for variable in variables:
            gradient = by_variable.get(id(variable))
            if variable.trainable and gradient is not None:
                arrays.append(np.asarray(gradient).astype(np.float64))
            elif variable.trainable:  # not on the loss path: torch leaves it at zero too
                arrays.append(np.zeros(variable.shape))
            else:  # running statistics: no gradient; their value keeps to_torch's shapes right
                arrays.append(np.asarray(variable.numpy()).astype(np.float64))
        for spec, array in zip(port.tensors, port.to_torch(*arrays), strict=True):
            if spec.trainable:
                mapped[spec.name] = np.asarray(array)
    return mapped


def forward_and_gradients(
    twins: Twins, x: np.ndarray, y: np.ndarray, tolerances: Tolerances
) -> tuple[SectionResult, SectionResult]:
    """Outputs in eval and train mode on one batch, and the loss gradient of every tensor.

    The train-mode outputs and the gradients come from the same pass; a train pass moves
    BatchNorm's running statistics, so the twins are reset afterwards.
    """
    precision = twins.setup.precision
    torch_side = torch_pass(twins.torch_model, *twins.torch_batch(x, y), precision)
    keras_side = keras_pass(twins, *twins.keras_batch(x, y))
    twins.reset()
    reference = None
    if precision in LOW_PRECISIONS:  # the floor that bf16/fp16 rounding alone sets
        above = reference_precision(precision)
        reference = torch_pass(reference_model(twins, above), *twins.torch_batch(x, y, above), above)
    forward = _forward_section(torch_side, keras_side, reference, len(y), tolerances, precision)
    gradients = _gradient_section(torch_side, keras_side, reference, tolerances, precision)
    return forward, gradients


def _forward_section(torch_side, keras_side, reference, batch, tolerances, precision) -> SectionResult:
    modes = {}
    for mode in ("train", "eval"):
        a, b = torch_side[mode], keras_side[mode]
        diff = np.abs(a - b) if a.shape == b.shape else np.array([np.inf])
        modes[mode] = {
            "max_abs_diff": max_abs_diff(a, b),
            "mean_abs_diff": float(diff.mean()) if np.all(np.isfinite(diff)) else float("inf"),
            "max_abs_output": float(np.max(np.abs(a))) if a.size else 0.0,
            "shape": list(a.shape),
        }
    floor = None
    if reference is not None:
        floor = max(max_abs_diff(torch_side[m], reference[m]) for m in ("train", "eval"))
    limit = bound(tolerances.forward, floor, precision)
    worst_mode = max(modes, key=lambda m: modes[m]["max_abs_diff"])
    value = modes[worst_mode]["max_abs_diff"]
    passed = value <= limit
    train, eval_ = (fmt(modes[m]["max_abs_diff"]) for m in ("train", "eval"))
    summary = f"max |diff| {train} (train), {eval_} (eval)"
    limit_text = _limit_text(limit, tolerances.forward, floor)
    reason = (
        f"{summary} <= {limit_text}"
        if passed
        else f"{worst_mode}-mode outputs differ: {summary} > {limit_text}"
    )
    return SectionResult(
        "forward",
        "max |diff| of the outputs on the first batch (train / eval mode)",
        value,
        limit,
        passed,
        reason,
        {"batch_size": int(batch), "noise_floor": floor, **modes},
    )


def _limit_text(limit: float, tolerance: float, floor: float | None) -> str:
    if limit == tolerance:
        return fmt(limit)
    return f"{fmt(limit)} (twice torch's own distance from float32, {fmt(floor)})"


def _gradient_section(torch_side, keras_side, reference, tolerances, precision) -> SectionResult:
    torch_grads, keras_grads = torch_side["gradients"], keras_side["gradients"]
    common = [name for name in torch_grads if name in keras_grads]
    gaps = tensor_gaps(
        {n: torch_grads[n] for n in common}, {n: keras_grads[n] for n in common}, GRADIENT_FLOOR
    )
    floor = None
    if reference is not None:
        own = tensor_gaps(reference["gradients"], torch_grads, GRADIENT_FLOOR)
        floor = own[0].relative if own else 0.0
    limit = bound(tolerances.gradient, floor, precision)
    missing = sorted(set(torch_grads) ^ set(keras_grads))
    over = [g for g in gaps if g.relative > limit]
    worst = gaps[0] if gaps else None
    limit_text = _limit_text(limit, tolerances.gradient, floor)
    if missing:
        reason = f"tensors with a gradient in one framework only: {', '.join(missing[:5])}"
    elif over:
        more = ""
        if len(over) > 1:
            more = f"; {len(over) - 1} more above it: " + ", ".join(g.name for g in over[1:4])
        reason = f"{worst.describe()} > {limit_text}{more}"
    else:
        reason = f"worst tensor {worst.describe()} <= {limit_text}" if worst else "no trainable tensors"
    return SectionResult(
        "gradients",
        "max relative error of a tensor's gradient (max |diff| / max |torch grad|)",
        worst.relative if worst else 0.0,
        limit,
        not missing and not over,
        reason,
        {
            "worst_tensor": worst.name if worst else None,
            "loss": {"torch": torch_side["loss"], "keras": keras_side["loss"]},
            "noise_floor": floor,
            "tensors_above_tolerance": [g.name for g in over],
            "tensors": gap_rows(gaps, None),
        },
    )


# ----------------------------------------------------------------------------- training


def check_training(
    twins: Twins, batches: list[np.ndarray], table: np.ndarray, tolerances: Tolerances
) -> SectionResult:
    """``len(batches)`` optimizer steps in each framework on the same batches at the same
    rates; the loss of every step (before its update) and the tensors at the end.

    A torch copy in the higher reference precision also trains on the same batches: how
    far the torch twin drifts from it is the noise floor of this training run (BatchNorm
    and high learning rates amplify rounding), which tells a gap that is rounding from
    one that is a real difference.
    """
    split = twins.setup.dataset.train
    torch_step, keras_step = twin_steps(twins, table)
    torch_losses, keras_losses = [], []
    for index in batches:
        x, y = split.x[index], split.y[index]
        torch_losses.append(float(torch_step(*twins.torch_batch(x, y))))
        keras_losses.append(float(keras_step(*twins.keras_batch(x, y))))
    final = tensor_gaps(twins.torch_state(), twins.keras_state())
    final.sort(key=lambda g: (-g.max_abs_diff, g.name))
    twins.reset()
    above = reference_precision(twins.setup.precision)
    reference = reference_losses(twins, batches, table, above) if above else None
    return _training_section(
        np.array(torch_losses), np.array(keras_losses), reference, above, final, table, tolerances, twins
    )


def reference_losses(
    twins: Twins, batches: list[np.ndarray], table: np.ndarray, precision: str
) -> np.ndarray:
    """The torch twin's losses when it trains in ``precision`` from the same initial tensors."""
    step = TorchStep(reference_model(twins, precision), twins.setup.recipe.optimizer, table, precision)
    split = twins.setup.dataset.train
    return np.array([float(step(*twins.torch_batch(split.x[i], split.y[i], precision))) for i in batches])


def loss_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| per step; a step where either loss is not finite is an infinite gap."""
    finite = np.isfinite(a) & np.isfinite(b)
    return np.where(finite, np.abs(a - b), np.inf)


def first_over(gap: np.ndarray, limit: float) -> int | None:
    """1-based step where ``gap`` first exceeds ``limit``."""
    over = np.nonzero(gap > limit)[0]
    return int(over[0]) + 1 if len(over) else None


def _training_section(
    torch_losses, keras_losses, reference, above, final, table, tolerances, twins
) -> SectionResult:
    precision = twins.setup.precision
    gap = loss_gap(torch_losses, keras_losses)
    floor_gap = loss_gap(torch_losses, reference) if reference is not None else None
    limit = bound(tolerances.loss, float(floor_gap.max()) if floor_gap is not None else None, precision)
    steps = len(gap)
    worst_step = int(np.argmax(gap)) + 1
    first = first_over(gap, limit)
    value = float(gap.max())
    worst_tensor = final[0] if final else None
    limit_text = (
        fmt(limit) if limit == tolerances.loss else f"{fmt(limit)} (twice torch's own distance from float32)"
    )
    if first is None:
        reason = f"max |loss gap| {fmt(value)} at step {worst_step} of {steps} <= {limit_text}"
    elif not (np.isfinite(torch_losses[first - 1]) and np.isfinite(keras_losses[first - 1])):
        side = "torch" if not np.isfinite(torch_losses[first - 1]) else "keras"
        reason = f"the {side} loss is not finite from step {first} of {steps}"
    else:
        reason = (
            f"loss gap first exceeds {limit_text} at step {first} "
            f"({fmt(float(gap[first - 1]))}); largest {fmt(value)} at step {worst_step} of {steps}"
        )
    if first is not None and worst_tensor is not None:
        reason += f"; at the end {worst_tensor.name} differs most ({fmt(worst_tensor.max_abs_diff)})"
    floor = None
    if reference is not None:
        floor = _noise_floor(torch_losses, keras_losses, reference, above, limit, first is None)
        if first is not None:
            reason += f"; {floor['verdict']}"
    return SectionResult(
        "training",
        f"max |loss gap| over {steps} steps",
        value,
        limit,
        first is None,
        reason,
        {
            "steps": steps,
            "max_gap_step": worst_step,
            "first_step_over_tolerance": first,
            "final_loss": {"torch": float(torch_losses[-1]), "keras": float(keras_losses[-1])},
            "loss": {"torch": torch_losses.tolist(), "keras": keras_losses.tolist()},
            "gap": gap.tolist(),
            "lr": [float(table[min(i, len(table) - 1)]) for i in range(steps)],
            "noise_floor": floor,
            "final_weights_worst_tensor": worst_tensor.name if worst_tensor else None,
            "final_weights": gap_rows(final),
        },
    )


REFERENCE_NAMES = {"64-true": "float64", "32-true": "float32"}


def _noise_floor(torch_losses, keras_losses, reference, above, limit, passed: bool) -> dict[str, Any]:
    """How far each run is from torch's reference-precision run, and what that says of the gap."""
    name = REFERENCE_NAMES[above]
    torch_gap, keras_gap = loss_gap(torch_losses, reference), loss_gap(keras_losses, reference)
    torch_first, keras_first = first_over(torch_gap, limit), first_over(keras_gap, limit)
    facts = (
        f"torch is up to {fmt(float(torch_gap.max()))} from torch in {name} "
        f"(over the limit from step {torch_first or '-'}), keras up to {fmt(float(keras_gap.max()))} "
        f"(from step {keras_first or '-'})"
    )
    if passed:
        verdict = facts
    elif torch_first is None:
        verdict = f"{facts}: not rounding, the twins compute something different"
    elif keras_first is None or keras_first >= torch_first:
        verdict = f"{facts}: this run amplifies rounding, the gap is at its noise level"
    else:
        verdict = (
            f"{facts}: keras leaves the {name} path first, so besides amplified rounding there is a "
            "small systematic difference (optimizer arithmetic, an epsilon, a lower-precision reduction)"
        )
    return {
        "reference": f"torch in {name}",
        "loss": reference.tolist(),
        "torch_gap": torch_gap.tolist(),
        "keras_gap": keras_gap.tolist(),
        "torch_max_gap": float(torch_gap.max()),
        "keras_max_gap": float(keras_gap.max()),
        "torch_first_step_over_tolerance": torch_first,
        "keras_first_step_over_tolerance": keras_first,
        "verdict": verdict,
    }
