"""The parity sections: weights after the copy, forward outputs, gradients, training.

Every section starts from the twins' initial tensors and leaves them there (``reset``),
so the order of sections never changes a result. Gradients of the Keras twin are mapped
into the canonical (torch) layout with the weight table's ``to_torch`` transforms: those
are pure re-layouts (transposes, reshapes, gate reorders, splits), so the function that
maps a weight maps its gradient too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.compare.results import SectionResult, TensorGap, fmt, max_abs_diff, tensor_gaps
from zoo.compare.steps import KerasStep, TorchStep, dense_gradients, keras_loss, torch_loss
from zoo.compare.tolerances import Tolerances
from zoo.compare.twins import Twins, loss_dtype, torch_autocast
from zoo.weights import keras_layer

WORST = 10  # tensors listed per section in the report
# A gradient below this fraction of the largest one is float noise around zero (see tensor_gaps).
GRADIENT_FLOOR = 1e-6


def gap_rows(gaps: list[TensorGap], limit: int | None = WORST) -> list[dict[str, Any]]:
    return [g.__dict__ for g in (gaps if limit is None else gaps[:limit])]


# ------------------------------------------------------------------------------ weights


def check_weights(twins: Twins, tolerances: Tolerances) -> SectionResult:
    """Read every tensor back from the Keras twin right after the copy: a table whose
    ``to_keras`` and ``to_torch`` disagree, or a variable the table misses, shows here by name."""
    from zoo.checkpoint import model_tensors

    gaps = tensor_gaps(model_tensors(twins.torch_model), twins.keras_tensors())
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
        {"worst_tensor": worst.name, "tensors": gap_rows(gaps)},
    )


# ------------------------------------------------------------------- forward + gradients


def forward_and_gradients(
    twins: Twins, x: np.ndarray, y: np.ndarray, tolerances: Tolerances
) -> tuple[SectionResult, SectionResult]:
    """Outputs in eval and train mode on one batch, and the loss gradient of every tensor.

    The train-mode outputs and the gradients come from the same pass; a train pass moves
    BatchNorm's running statistics, so the twins are reset afterwards.
    """
    import tensorflow as tf
    import torch

    precision = twins.setup.precision
    dtype = loss_dtype(precision)
    tx, ty = twins.torch_batch(x, y)
    kx, ky = twins.keras_batch(x, y)
    model = twins.torch_model

    model.eval()
    with torch.no_grad(), torch_autocast(precision):
        torch_eval = model(tx).float().numpy()
    keras_eval = np.asarray(twins.keras_model(kx, training=False), dtype=np.float32)

    model.train()
    model.zero_grad(set_to_none=True)
    with torch_autocast(precision):
        torch_train = model(tx)
    torch_value = torch_loss(torch_train, ty, dtype)
    torch_value.backward()
    torch_grads = {
        name: (np.zeros(p.shape) if p.grad is None else p.grad.detach().double().numpy())
        for name, p in model.named_parameters()
    }
    with tf.GradientTape() as tape:
        keras_train = twins.keras_model(kx, training=True)
        keras_value = keras_loss(keras_train, ky, dtype)
    keras_grads = keras_gradients(twins, tape, keras_value)
    twins.reset()

    forward = _forward_section(
        torch_train.detach().float().numpy(),
        np.asarray(keras_train, dtype=np.float32),
        torch_eval,
        keras_eval,
        len(y),
        tolerances,
    )
    trainable = [name for name in keras_grads if name in torch_grads]
    gaps = tensor_gaps(
        {n: torch_grads[n] for n in trainable}, {n: keras_grads[n] for n in trainable}, GRADIENT_FLOOR
    )
    missing = sorted(set(torch_grads) ^ set(keras_grads))
    losses = {"torch": float(torch_value.detach()), "keras": float(keras_value)}
    return forward, _gradient_section(gaps, missing, losses, tolerances)


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


def _forward_section(torch_train, keras_train, torch_eval, keras_eval, batch, tolerances) -> SectionResult:
    modes = {}
    for mode, (a, b) in {"train": (torch_train, keras_train), "eval": (torch_eval, keras_eval)}.items():
        finite = np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and a.shape == b.shape
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if finite else None
        modes[mode] = {
            "max_abs_diff": max_abs_diff(a, b),
            "mean_abs_diff": float(diff.mean()) if diff is not None else float("inf"),
            "max_abs_output": float(np.max(np.abs(a))) if a.size else 0.0,
            "shape": list(a.shape),
        }
    worst_mode = max(modes, key=lambda m: modes[m]["max_abs_diff"])
    value = modes[worst_mode]["max_abs_diff"]
    passed = value <= tolerances.forward
    train, eval_ = (fmt(modes[m]["max_abs_diff"]) for m in ("train", "eval"))
    summary = f"max |diff| {train} (train), {eval_} (eval)"
    if passed:
        reason = f"{summary} <= {fmt(tolerances.forward)}"
    else:
        reason = f"{worst_mode}-mode outputs differ: {summary} > {fmt(tolerances.forward)}"
    return SectionResult(
        "forward",
        "max |diff| of the outputs on the first batch (train / eval mode)",
        value,
        tolerances.forward,
        passed,
        reason,
        {"batch_size": int(batch), **modes},
    )


def _gradient_section(gaps, missing, losses, tolerances) -> SectionResult:
    over = [g for g in gaps if g.relative > tolerances.gradient]
    worst = gaps[0] if gaps else None
    value = worst.relative if worst else 0.0
    if missing:
        passed = False
        reason = f"tensors with a gradient in one framework only: {', '.join(missing[:5])}"
    elif over:
        passed = False
        more = (
            f"; {len(over) - 1} more above it: " + ", ".join(g.name for g in over[1:4])
            if len(over) > 1
            else ""
        )
        reason = f"{worst.describe()} > {fmt(tolerances.gradient)}{more}"
    else:
        passed = True
        reason = f"worst tensor {worst.describe()} <= {fmt(tolerances.gradient)}" if worst else "no gradients"
    return SectionResult(
        "gradients",
        "max relative error of a tensor's gradient (max |diff| / max |torch grad|)",
        value,
        tolerances.gradient,
        passed,
        reason,
        {
            "worst_tensor": worst.name if worst else None,
            "loss": losses,
            "tensors_above_tolerance": [g.name for g in over],
            "tensors": gap_rows(gaps, None),
        },
    )


# ----------------------------------------------------------------------------- training


def check_training(
    twins: Twins, batches: list[np.ndarray], table: np.ndarray, tolerances: Tolerances
) -> SectionResult:
    """``len(batches)`` optimizer steps in each framework on the same batches at the same
    rates; the loss of every step (before its update) and the tensors at the end."""
    from zoo.checkpoint import model_tensors

    split = twins.setup.dataset.train
    torch_step, keras_step = TorchStep(twins, table), KerasStep(twins, table)
    torch_losses, keras_losses = [], []
    for index in batches:
        x, y = split.x[index], split.y[index]
        torch_losses.append(float(torch_step(*twins.torch_batch(x, y))))
        keras_losses.append(float(keras_step(*twins.keras_batch(x, y))))
    final = tensor_gaps(model_tensors(twins.torch_model), twins.keras_tensors())
    final.sort(key=lambda g: (-g.max_abs_diff, g.name))
    twins.reset()
    return _training_section(np.array(torch_losses), np.array(keras_losses), final, table, tolerances)


def _training_section(torch_losses, keras_losses, final, table, tolerances) -> SectionResult:
    finite = np.isfinite(torch_losses) & np.isfinite(keras_losses)
    gap = np.where(finite, np.abs(torch_losses - keras_losses), np.inf)
    steps = len(gap)
    worst_step = int(np.argmax(gap)) + 1
    over = np.nonzero(gap > tolerances.loss)[0]
    first = int(over[0]) + 1 if len(over) else None
    value = float(gap.max())
    worst_tensor = final[0] if final else None
    tensor_note = (
        f"; at the end {worst_tensor.name} differs most ({fmt(worst_tensor.max_abs_diff)})"
        if worst_tensor
        else ""
    )
    if first is None:
        reason = f"max |loss gap| {fmt(value)} at step {worst_step} of {steps} <= {fmt(tolerances.loss)}"
    elif not finite[first - 1]:
        side = "torch" if not np.isfinite(torch_losses[first - 1]) else "keras"
        reason = f"the {side} loss is not finite from step {first} of {steps}{tensor_note}"
    else:
        reason = (
            f"loss gap first exceeds {fmt(tolerances.loss)} at step {first} ({fmt(float(gap[first - 1]))}); "
            f"largest {fmt(value)} at step {worst_step} of {steps}{tensor_note}"
        )
    return SectionResult(
        "training",
        f"max |loss gap| over {steps} steps",
        value,
        tolerances.loss,
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
            "final_weights_worst_tensor": worst_tensor.name if worst_tensor else None,
            "final_weights": gap_rows(final),
        },
    )
