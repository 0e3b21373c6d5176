"""The torch twin's state carried into the Keras twin's layout: snapshots of a run, gradients
mapped back to the canonical layout, and optimizer moments moved slot by slot.

Optimizer state maps into the Keras optimizer with the weight table's ``to_keras``: those
are pure re-layouts (transposes, reshapes, gate reorders, splits) and the moments are
elementwise, so the map that moves a weight moves its moments too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from zoo.checkpoint.tables import keras_layer
from zoo.compare.steps import dense_gradients, keras_compiled, lightning_task
from zoo.compare.twins import Twins, exact_array

# torch optimizer state -> the slot list of zoo's Keras optimizers (zoo.keras.optimizers).
KERAS_SLOTS = {"exp_avg": "_m", "exp_avg_sq": "_v", "momentum_buffer": "_buffers"}


@dataclass
class Snapshot:
    """The torch twin's state before update ``step`` (1-based): canonical tensors (each in the
    narrowest dtype that holds it exactly) and the optimizer's ``state_dict`` (moments, step, rate).

    Kept on disk, in ``folder``, and read back when checked: a run keeps up to six of them,
    and six copies of an 86M-parameter ViT with its Adam moments (~1 GB each) next
    to both twins and their float64 references do not fit in the memory of a small machine."""

    step: int
    folder: Path

    @property
    def tensors(self) -> dict[str, np.ndarray]:
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

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: exact_array(value) for name, value in twins.torch_model.state_dict().items()}
    save_file({k: np.ascontiguousarray(v) if v.ndim else v for k, v in tensors.items()},
              str(folder / "tensors.safetensors"))  # fmt: skip
    torch.save(torch_optimizer.state_dict(), folder / "optimizer.pt")
    return Snapshot(step, folder)


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
        self.clip_norm = twins.setup.recipe.trainer.gradient_clip_norm
        self.reason: str | None = None

    def load(self, state: Snapshot) -> bool:
        """Both optimizers at the snapshot's state; False (and ``reason``) if impossible."""
        # Built here, not with the updater: a check without an update (the forward section,
        # --forward-only) needs no slots, and they are a model's worth per moment.
        self.keras.build(self.variables)
        saved = state.optimizer  # read from disk: the optimizer may take its tensors as they are
        self.torch.state.clear()  # else the last state is alive beside the one loading (a model's worth)
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
        import tensorflow as tf
        import torch

        for name, parameter in self.twins.torch_model.named_parameters():
            value = gradients.get(name)
            # A copy: clipping scales the gradients in place, and ``gradients`` is also judged.
            parameter.grad = None if value is None else torch.tensor(value, dtype=parameter.dtype)
        if self.clip_norm:  # Lightning clips before the step; zoo's Keras optimizers inside theirs
            torch.nn.utils.clip_grad_norm_(self.task.parameters(), self.clip_norm)
        self.torch.step()
        # Neither is read again (the next update loads its state from a snapshot), and each is
        # a model's worth beside the Keras gradients and the moves the caller measures next.
        self.task.zero_grad(set_to_none=True)
        self.torch.state.clear()
        # Tensors made one at a time: Keras would convert a list of arrays all at once, two
        # copies of the gradients alive together.
        grads = {
            id(variable): tf.convert_to_tensor(np.asarray(array, dtype=_gradient_dtype(variable)))
            for variable, array in _trainable_in_keras_layout(self.twins, gradients)
        }
        pairs = [(grads.get(id(v), tf.zeros(v.shape, _gradient_dtype(v))), v) for v in self.variables]
        self.keras.apply_gradients(pairs)


def _gradient_dtype(variable) -> type:
    """float64 for float64 variables; float32 otherwise (zoo's optimizers keep low-precision
    weights' arithmetic in float32, and torch's bf16 gradients are exact in it)."""
    return np.float64 if variable.dtype == "float64" else np.float32
