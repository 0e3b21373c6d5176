"""One step of both twins from identical state: the check that tells amplified rounding
from a different computation.

Training is chaotic: a difference of one unit in the last place (a max-pool window that
is an exact tie in one framework and not in the other, a sum in another order) moves a
gradient, Adam divides by a tiny second moment, and after some steps two correct twins
are visibly apart. Whether they still compute the same thing is a question about one
step, not about the trajectory: so the comparison re-synchronises. It takes the torch
twin's state at a step of the run (weights, running statistics, the optimizer's moments
and step count), loads it into both twins of both precisions, and compares on that step's
batch: the outputs, the loss, every gradient, and one optimizer update from the same
gradients (the torch twin's, fed to all four optimizers, so the update check sees the
optimizers alone).

Every figure is bounded as in ``zoo.compare.tolerances``: both frameworks' own rounding,
measured against their reference-precision pair at the same state, plus the fixed
allowance. The state travels into the Keras twin by :mod:`zoo.compare.transfer`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoo.compare.results import Bounded, bounded_gaps
from zoo.compare.steps import Batch, keras_pass, torch_pass
from zoo.compare.tolerances import Tolerances, parameter_epsilon
from zoo.compare.transfer import Snapshot, Updater, keras_gradients
from zoo.compare.twins import Twins
from zoo.precision import PRECISIONS

# A gradient or update below this fraction of the largest one is float noise around zero
# (the gradient of an attention key bias is exactly zero in exact arithmetic).
GRADIENT_FLOOR = 1e-6


# -------------------------------------------------------------------------- one pass


def keras_side(twins: Twins, model, batch: tuple) -> dict[str, Any]:
    """The Keras pass (:func:`zoo.compare.steps.keras_pass`) with its gradients in the
    canonical layout."""
    found, tape, loss = keras_pass(model, batch)
    return {**found, "gradients": keras_gradients(twins, tape, loss)}


# ---------------------------------------------------------------------- a checked point


@dataclass
class PointCheck:
    """Both twins from one state on one batch: every check and whether it held."""

    step: int
    forward: list[Bounded]  # "train" and "eval" outputs, absolute
    loss: Bounded
    gradients: list[Bounded]  # per trainable tensor, relative to its largest gradient
    update: list[Bounded] | None  # per trainable tensor, relative to its largest update
    missing: list[str] = field(default_factory=list)  # gradients found in one framework only
    update_skipped: str | None = None
    losses: dict[str, float] = field(default_factory=dict)  # torch / keras at this point

    def checks(self) -> dict[str, list[Bounded]]:
        found = {"forward": self.forward, "loss": [self.loss], "gradients": self.gradients}
        if self.update is not None:
            found["update"] = self.update
        return found

    @property
    def passed(self) -> bool:
        return not self.missing and all(g.passed for gaps in self.checks().values() for g in gaps)

    def worst(self) -> tuple[str, Bounded]:
        """The check and entry that use the most of their bound."""
        return max(
            ((kind, gaps[0]) for kind, gaps in self.checks().items() if gaps), key=lambda kg: kg[1].use
        )

    def describe(self) -> str:
        """The check that fails worst (or uses most of its bound), in words."""
        if self.missing:
            return f"gradients in one framework only: {', '.join(self.missing[:5])}"
        kind, worst = self.worst()
        return f"{kind} {worst.describe(kind in RELATIVE)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "passed": self.passed,
            "losses": self.losses,
            "missing": self.missing,
            "update_skipped": self.update_skipped,
            **{kind: [g.as_dict() for g in gaps] for kind, gaps in self.checks().items()},
        }


RELATIVE = ("gradients", "update")


class Checker:
    """Checks points of a run: the recipe's pair and its reference pair, one updater each."""

    def __init__(self, pair: Twins, reference: Twins | None, table: np.ndarray, tolerances: Tolerances):
        self.pair, self.reference, self.table, self.tolerances = pair, reference, table, tolerances
        self._updaters: dict[int, Updater] = {}

    def forget_updaters(self) -> None:
        """Drop the updaters (the next check builds them anew): the training section compiles
        each Keras twin again, and an updater's optimizer (two model's worth of Adam moments,
        in float64 for the reference) would stay alive beside that compile's."""
        self._updaters.clear()

    def _updater(self, twins: Twins) -> Updater:
        if id(twins) not in self._updaters:
            self._updaters[id(twins)] = Updater(twins, self.table)
        return self._updaters[id(twins)]

    def check(self, step: int, batch: Batch, state: Snapshot | None) -> PointCheck:
        """Both pairs from ``state`` on one batch, with one optimizer update from it
        (``None``: the initial tensors, and no update); both pairs are back at their
        initial tensors afterwards."""
        update = state is not None
        tensors = state.tensors if state is not None else self.pair.initial
        sides = self._measure(self.pair, tensors, batch, state, None)
        reference = None
        if self.reference is not None:
            feed = sides["torch"]["gradients"] if update else None
            reference = self._measure(self.reference, tensors, batch, state, feed)
        return self._judge(step, sides, reference)

    def _measure(self, twins: Twins, tensors, batch: Batch, state, feed) -> dict[str, Any]:
        """The passes of one pair; with a ``state``, one update of both twins from it with
        the gradients ``feed`` (default: this pair's torch gradients). The reference pair is
        fed the recipe pair's, so the update check compares optimizers, not gradients."""
        twins.load(tensors)
        updater = self._updater(twins)
        torch_found = torch_pass(updater.task, batch.torch, twins.precision)
        release_memory(twins, collect=False)  # each pass frees its graph: activations, temporaries
        keras_found = keras_side(twins, updater.keras_model, batch.keras)
        release_memory(twins, collect=False)
        found = {"torch": torch_found, "keras": keras_found, "skipped": None}
        if state is not None:
            twins.load(tensors)  # the train passes moved running statistics
            if updater.load(state):
                release_memory(twins, collect=False)  # the optimizer state read from the snapshot
                # A snapshot holds the pair's torch tensors, exact in every twin's dtype: the
                # update starts from them, and no copy of the twin's weights is needed.
                start = _trainable(twins, tensors)
                updater.step(torch_found["gradients"] if feed is None else feed)
                release_memory(twins, collect=False)
                wide = PRECISIONS[twins.precision].parameters == "float64"
                for side, after in (("torch", twins.torch_tensors()), ("keras", twins.keras_tensors())):
                    moved, found[side]["largest"] = _moves(start, after, wide)
                    found[side]["moved"] = moved
            else:
                found["skipped"] = updater.reason
        twins.torch_model.zero_grad(set_to_none=True)  # a model's worth of memory until the next pass
        twins.reset()
        release_memory(twins)
        return found

    def _judge(self, step: int, sides: dict[str, Any], reference: dict[str, Any] | None) -> PointCheck:
        tol = self.tolerances
        t, k = sides["torch"], sides["keras"]
        rt, rk = (reference["torch"], reference["keras"]) if reference else (None, None)

        def pick(side, key):
            return None if side is None else side[key]

        outputs = {m: t[m] for m in ("train", "eval")}
        forward = bounded_gaps(
            outputs,
            {m: k[m] for m in outputs},
            None if rt is None else {m: rt[m] for m in outputs},
            None if rk is None else {m: rk[m] for m in outputs},
            tol.forward,
            relative=False,
        )
        loss = bounded_gaps(
            {"loss": t["loss"]}, {"loss": k["loss"]},
            None if rt is None else {"loss": rt["loss"]}, None if rk is None else {"loss": rk["loss"]},
            tol.loss, relative=False,
        )[0]  # fmt: skip
        common = [n for n in t["gradients"] if n in k["gradients"]]
        missing = sorted(set(t["gradients"]) ^ set(k["gradients"]))
        gradients = bounded_gaps(
            {n: t["gradients"][n] for n in common},
            {n: k["gradients"][n] for n in common},
            pick(rt, "gradients"),
            pick(rk, "gradients"),
            tol.gradient,
            relative=True,
            floor_fraction=GRADIENT_FLOOR,
        )
        update, skipped = None, sides["skipped"] or (reference or {}).get("skipped")
        if "moved" in t and not skipped:
            update = self._updates(sides, reference)
        return PointCheck(
            step, forward, loss, gradients, update, missing, skipped, {"torch": t["loss"], "keras": k["loss"]}
        )

    def _updates(self, sides: dict[str, Any], reference: dict[str, Any] | None) -> list[Bounded]:
        """Per tensor, the gap of the new weights relative to how far torch moved that
        tensor. The new weight is rounded to the parameter dtype, so one unit of that
        rounding in the largest weight is allowed on top (the reference pair's dtype, or
        the recipe's without a reference)."""
        epsilon = parameter_epsilon((self.reference or self.pair).precision)
        largest = (reference or sides)["torch"]["largest"]
        unit = {n: epsilon * value for n, value in largest.items()}
        return bounded_gaps(
            sides["torch"]["moved"],
            sides["keras"]["moved"],
            None if reference is None else reference["torch"]["moved"],
            None if reference is None else reference["keras"]["moved"],
            self.tolerances.update,
            relative=True,
            floor_fraction=GRADIENT_FLOOR,
            rounding_unit=unit,
        )


def _moves(
    start: dict[str, np.ndarray], after: Iterable[tuple[str, np.ndarray]], wide: bool
) -> tuple[dict, dict]:
    """How far an update moved each tensor of ``start``, and its largest new |weight|, with
    ``after`` read one tensor at a time, so no second copy of the weights is held: each move
    is taken in float64 and kept in float32 unless the twin is ``wide`` (float64): a float32
    move's rounding is far below any bound it is checked against, and a GPT-2's moves are
    0.5 GB in float32."""
    moved, largest = {}, {}
    for name, value in after:
        if name not in start:  # not trained: running statistics, a LoRA base
            continue
        exact = np.asarray(value, np.float64) - np.asarray(start[name], np.float64)
        moved[name] = exact if wide else exact.astype(np.float32)
        largest[name] = float(np.max(np.abs(value), initial=0.0))
    return moved, largest


RELEASE_FROM_BYTES = 128 * 2**20  # weights of a pair below which a release frees too little


def release_memory(twins: Twins, collect: bool = True) -> None:
    """Hand freed buffers back to the system between checks: the passes of a GPT-2-sized pair
    free gigabytes that glibc's allocator would otherwise keep, and the next pass's arrays
    would come on top of them (trimmed after each pass as well, the comparison of a 32M-parameter
    GPT-2 peaked at 5.4 GB instead of 6.4). Not for a small pair: with both frameworks loaded
    the garbage collection (``collect``) alone took ~0.25 s under cProfile, 17 % of an rnn-small
    comparison over 15 calls."""
    if worth_releasing(twins):
        free_memory(collect)


def worth_releasing(twins: Twins) -> bool:
    return sum(p.numel() * p.element_size() for p in twins.torch_model.parameters()) >= RELEASE_FROM_BYTES


def free_memory(collect: bool = True) -> None:
    """Free what reference cycles hold (``collect``: a Lightning Trainer with its optimizer's
    moments, a traced Keras step) and give glibc's freed pages back to the system."""
    if collect:
        gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _trainable(twins: Twins, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = set(twins.trainable)
    return {n: v for n, v in state.items() if n in names}
