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
allowance. Optimizer state maps into the Keras optimizer with the weight table's
``to_keras``: those are pure re-layouts (transposes, reshapes, gate reorders, splits) and
the moments are elementwise, so the map that moves a weight moves its moments too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo.compare.results import Bounded, bounded_gaps
from zoo.compare.steps import Batch, dense_gradients, keras_compiled, keras_pass, lightning_task, torch_pass
from zoo.compare.tolerances import Tolerances, parameter_epsilon
from zoo.compare.twins import Twins
from zoo.weights import keras_layer

# A gradient or update below this fraction of the largest one is float noise around zero
# (the gradient of an attention key bias is exactly zero in exact arithmetic).
GRADIENT_FLOOR = 1e-6
# torch optimizer state -> the slot list of zoo's Keras optimizers (zoo.keras.optimizers).
KERAS_SLOTS = {"exp_avg": "_m", "exp_avg_sq": "_v", "momentum_buffer": "_buffers"}


@dataclass
class Snapshot:
    """The torch twin's state before update ``step`` (1-based): canonical tensors (float64,
    exact for every precision) and the optimizer's ``state_dict`` (moments, step, rate).

    Kept on disk, in ``folder``, and read back when checked: a run keeps up to six of them,
    and six float64 copies of an 86M-parameter ViT with its Adam moments (~1.4 GB each) next
    to both twins and their float64 references do not fit in the memory of a small machine."""

    step: int
    folder: Path

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        from safetensors.numpy import load_file

        return load_file(self.folder / "tensors.safetensors")

    @property
    def optimizer(self) -> dict[str, Any]:
        import torch

        return torch.load(self.folder / "optimizer.pt", weights_only=True)

    def move(self, folder: Path) -> Snapshot:
        self.folder.rename(folder)
        return Snapshot(self.step, folder)


def snapshot(twins: Twins, torch_optimizer: Any, step: int, folder: Path) -> Snapshot:
    """Write the state before update ``step`` into ``folder`` (replacing what it held)."""
    import torch
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) if v.ndim else v for k, v in twins.torch_state().items()},
              str(folder / "tensors.safetensors"))  # fmt: skip
    torch.save(torch_optimizer.state_dict(), folder / "optimizer.pt")
    return Snapshot(step, folder)


# -------------------------------------------------------------------------- one pass


def keras_side(twins: Twins, model, batch: tuple) -> dict[str, Any]:
    """The Keras pass (:func:`zoo.compare.steps.keras_pass`) with its gradients in the
    canonical layout."""
    found, tape, loss = keras_pass(model, batch)
    return {**found, "gradients": keras_gradients(twins, tape, loss)}


def keras_gradients(twins: Twins, tape, loss) -> dict[str, np.ndarray]:
    """The gradient of every trainable canonical tensor, computed on the Keras twin and
    mapped into the torch layout by each port's ``to_torch``."""
    ports = _ports(twins)
    trainable = [v for _, variables in ports for v in variables if v.trainable]
    gradients = dense_gradients(tape.gradient(loss, trainable))
    by_variable = {id(v): g for v, g in zip(trainable, gradients, strict=True)}
    mapped: dict[str, np.ndarray] = {}
    for port, variables in ports:
        arrays = []
        for variable in variables:
            gradient = by_variable.get(id(variable))
            dtype = _gradient_dtype(variable)  # exact, and half the bytes of float64 for float32
            if variable.trainable and gradient is not None:
                arrays.append(np.asarray(gradient).astype(dtype))
            elif variable.trainable:  # not on the loss path: torch leaves it at zero too
                arrays.append(np.zeros(variable.shape, dtype))
            else:  # running statistics: no gradient; their value keeps to_torch's shapes right
                arrays.append(np.asarray(variable.numpy()).astype(dtype))
        for spec, array in zip(port.tensors, port.to_torch(*arrays), strict=True):
            if spec.trainable:
                mapped[spec.name] = np.asarray(array)
    return mapped


def _trainable_in_keras_layout(twins, tensors: dict[str, np.ndarray]):
    """(Keras variable, array) for each trainable variable, converted from per-tensor values
    in the canonical layout (zeros where a tensor has none, or is not trainable)."""
    for port, variables in _ports(twins):
        arrays = [
            tensors.get(spec.name, np.zeros(spec.shape)) if spec.trainable else np.zeros(spec.shape)
            for spec in port.tensors
        ]
        for variable, array in zip(variables, port.to_keras(*arrays), strict=True):
            if variable.trainable:
                yield variable, array


def _ports(twins: Twins) -> list[tuple[Any, list[Any]]]:
    found = []
    for port in twins.table:
        layer = keras_layer(twins.keras_model, port.layer)
        found.append((port, [keras_layer(layer, name) for name in port.variables]))
    return found


# ---------------------------------------------------------------- one optimizer update


class Updater:
    """One pair as the trainers build it: the Lightning task (its loss, and the optimizer of
    its ``configure_optimizers``, parameter groups included) and the Keras model compiled as
    ``fit`` compiles it (its loss and optimizer). The optimizers load a torch snapshot's state.

    ``reason`` says why the optimizer state cannot be carried over (then no update is
    compared): a torch state entry zoo's Keras optimizer has no slot for.
    """

    def __init__(self, twins: Twins, table: np.ndarray):
        self.twins = twins
        self.task = lightning_task(twins, table)
        self.torch = self.task.configure_optimizers()["optimizer"]
        # The optimizer's state is indexed in its parameter groups' order, not the module's.
        named = {id(p): name for name, p in twins.torch_model.named_parameters()}
        self.names = [named[id(p)] for group in self.torch.param_groups for p in group["params"]]
        self.keras_model, self.keras = keras_compiled(twins, table)
        self.variables = list(twins.keras_model.trainable_variables)
        self.keras.build(self.variables)
        self.clip_norm = twins.setup.recipe.trainer.gradient_clip_norm
        self.reason: str | None = None

    def load(self, state: Snapshot) -> bool:
        """Both optimizers at the snapshot's state; False (and ``reason``) if impossible."""
        saved = state.optimizer  # read from disk: the optimizer may take its tensors as they are
        self.torch.load_state_dict(saved)
        per_key: dict[str, dict[str, np.ndarray]] = {}
        steps = set()
        for index, entry in saved["state"].items():
            name = self.names[index]
            for key, value in entry.items():
                if key == "step":
                    steps.add(int(float(value)))
                elif key in KERAS_SLOTS and hasattr(self.keras, KERAS_SLOTS[key]):
                    # A view where the dtype allows (each slot converts its own piece on assign).
                    exact = value.detach().cpu()
                    exact = exact if exact.dtype.itemsize >= 4 else exact.float()
                    per_key.setdefault(key, {})[name] = exact.numpy()
                else:
                    self.reason = f"the torch optimizer's state {key!r} has no slot in the Keras optimizer"
                    return False
        if len(steps) > 1:
            self.reason = f"the torch optimizer's parameters are at different steps ({sorted(steps)})"
            return False
        self.keras.iterations.assign(steps.pop() if steps else state.step - 1)
        for key, attribute in KERAS_SLOTS.items():
            for slot in getattr(self.keras, attribute, None) or []:  # a fresh state: all zero
                slot.assign(np.zeros(slot.shape, dtype=slot.dtype))
            if key in per_key:
                self._assign_slots(getattr(self.keras, attribute), per_key[key])
        return True

    def _assign_slots(self, slots: list[Any], tensors: dict[str, np.ndarray]) -> None:
        """Canonical per-tensor state -> the slot of each Keras variable, through the table."""
        for variable, array in _trainable_in_keras_layout(self.twins, tensors):
            slot = slots[self.keras._get_variable_index(variable)]
            slot.assign(np.asarray(array).astype(slot.dtype))

    def step(self, gradients: dict[str, np.ndarray]) -> None:
        """One update of each twin from the same ``gradients`` (canonical layout, float64)."""
        import torch

        for name, parameter in self.twins.torch_model.named_parameters():
            value = gradients.get(name)
            # A copy: clipping scales the gradients in place, and ``gradients`` is also judged.
            parameter.grad = None if value is None else torch.tensor(value, dtype=parameter.dtype)
        if self.clip_norm:  # Lightning clips before the step; zoo's Keras optimizers inside theirs
            torch.nn.utils.clip_grad_norm_(self.task.parameters(), self.clip_norm)
        self.torch.step()
        grads = {
            id(variable): np.asarray(array, dtype=_gradient_dtype(variable))
            for variable, array in _trainable_in_keras_layout(self.twins, gradients)
        }
        pairs = [(grads.get(id(v), np.zeros(v.shape, _gradient_dtype(v))), v) for v in self.variables]
        self.keras.apply_gradients(pairs)


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
        keras_found = keras_side(twins, updater.keras_model, batch.keras)
        found = {"torch": torch_found, "keras": keras_found, "skipped": None}
        if state is not None:
            twins.load(tensors)  # the train passes moved running statistics
            if updater.load(state):
                start = _trainable(twins, twins.torch_state())
                updater.step(torch_found["gradients"] if feed is None else feed)
                wide = any(p.dtype.itemsize == 8 for p in twins.torch_model.parameters())
                for side, after in (("torch", twins.torch_state()), ("keras", twins.keras_state())):
                    moved, found[side]["largest"] = _moves(start, _trainable(twins, after), wide)
                    found[side]["moved"] = moved
            else:
                found["skipped"] = updater.reason
        twins.torch_model.zero_grad(set_to_none=True)  # a model's worth of memory until the next pass
        twins.reset()
        release_memory()
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


def _gradient_dtype(variable) -> type:
    """float64 for float64 variables; float32 otherwise (zoo's optimizers keep low-precision
    weights' arithmetic in float32, and torch's bf16 gradients are exact in it)."""
    return np.float64 if variable.dtype == "float64" else np.float32


def _moves(start: dict[str, np.ndarray], after: dict[str, np.ndarray], wide: bool) -> tuple[dict, dict]:
    """How far an update moved each tensor, and its largest new |weight|, without holding a
    second copy of the weights: each move is taken in float64 and kept in float32 unless the
    twin is ``wide`` (float64): a float32 move's rounding is far below any bound it is checked
    against, and a GPT-2's moves are 0.5 GB in float32."""
    moved, largest = {}, {}
    for name, value in after.items():
        exact = np.asarray(value, np.float64) - np.asarray(start[name], np.float64)
        moved[name] = exact if wide else exact.astype(np.float32)
        largest[name] = float(np.max(np.abs(value), initial=0.0))
    return moved, largest


def release_memory() -> None:
    """Hand freed buffers back to the system between checks: the passes of a GPT-2-sized pair
    free gigabytes that glibc's allocator would otherwise keep, and the next check's arrays
    would come on top of them."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _trainable(twins: Twins, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = set(twins.trainable)
    return {n: v for n, v in state.items() if n in names}
