"""One interface to a training framework, so the API and the CLI talk to it and never to torch
or TensorFlow themselves. Saving a twin as the common checkpoint and loading one into a twin
live here too: they need the framework's backend, and zoo.checkpoint (the file format, below
this module) imports nothing above it.

A backend is a thin adapter: the training loops stay in ``zoo/lightning`` and ``zoo/keras``,
and a backend only translates a :class:`~zoo.plan.RunPlan` or a built model into their calls.
Each framework has one public step kit (``zoo.lightning.steps``, ``zoo.keras.steps``) that
makes its training step from a :class:`StepPlan`: ``fit`` and ``zoo compare`` both step it.
Backends are named here by module path and imported on first use: ``zoo list`` and ``zoo
validate`` start no framework. A third framework plugs in as one more entry of :data:`BACKENDS`
(see docs/backends.md).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint
from zoo.checkpoint.state import check_state
from zoo.checkpoint.tensors import framework_of, tensors_to_save
from zoo.recipe import normalize_framework

if TYPE_CHECKING:
    import numpy as np

    from zoo.checkpoint.metadata import Checkpoint
    from zoo.data import Dataset
    from zoo.family import ArchitectureConfig, Family
    from zoo.finetune import InitPlan
    from zoo.plan import RunPlan
    from zoo.preprocessing import Preprocessing
    from zoo.recipe import Recipe

# framework name (the recipe's trainer.framework) -> "module:class" of its adapter
BACKENDS = {
    "lightning": "zoo.lightning.backend:LightningBackend",
    "keras": "zoo.keras.backend:KerasBackend",
}


@dataclass(frozen=True)
class StepPlan:
    """What a framework's training step is made from, in a run (:attr:`zoo.plan.RunPlan.steps`)
    and in ``zoo compare`` alike: each backend's step kit (``zoo.lightning.steps``,
    ``zoo.keras.steps``) builds the task or compiled model, the step options and the loader from
    it, so both callers step the same thing."""

    recipe: Recipe
    family: Family
    config: ArchitectureConfig  # bound to the data
    dataset: Dataset
    init: InitPlan | None = None  # a fine-tuning start the twin loads first

    @property
    def batch_size(self) -> int:
        return self.recipe.data.batch_size


class Backend(ABC):
    """What zoo asks of a framework: build and load twins, run a plan, evaluate, predict,
    and own its training states (written during :meth:`fit`, continued by :meth:`fit` of a
    plan whose ``resume`` names one)."""

    name: ClassVar[str]
    state_suffix: ClassVar[str]  # the file kind its training states are saved as under state/
    packages: ClassVar[tuple[str, ...]]  # whose versions a checkpoint it wrote records

    @abstractmethod
    def build(self, family: Family, config: ArchitectureConfig, seed: int | None = None) -> Any:
        """A twin of ``config``. With a ``seed``, holding the very tensors a run of that seed
        starts from (the same in every backend); without, initialised the framework's way."""

    @abstractmethod
    def load(self, checkpoint: Checkpoint) -> Any:
        """The twin holding an opened, already validated checkpoint's weights."""

    @abstractmethod
    def fit(self, plan: RunPlan) -> tuple[Any, dict[str, float]]:
        """Train, validate every epoch and test as ``plan`` says, saving training states into
        its run folder; return the trained twin and its test metrics (``train_seconds`` and
        ``replicas`` among them). Continues ``plan.resume`` where that state stopped."""

    @abstractmethod
    def evaluate(self, model: Any, dataset: Dataset, trainer: Any, batch_size: int) -> dict[str, float]:
        """The task's test metrics (``test_*``, the ones :meth:`fit` reports) of a built twin
        on ``dataset``'s test split, on the accelerator and in the precision of the recipe's
        ``trainer`` section, in one process."""

    @abstractmethod
    def predict(self, model: Any, inputs: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """The twin's outputs (logits) in eval mode for inputs in the canonical (torch)
        layout, as numpy: the same array from either backend, up to float rounding."""

    @abstractmethod
    def state_problem(self, path: Path) -> str | None:
        """What keeps one of its training states from being resumed (missing loop position,
        no weights...), found by opening it as a resume will, or None. Never runs code in it."""

    def check_state(self, path: Path) -> None:
        """Refuse a training state a resume could not use, in zoo's words, before any training
        (its checksum, then :meth:`state_problem`; see :func:`zoo.checkpoint.state.check_state`)."""
        if Path(path).suffix != f".{self.state_suffix}":
            raise CheckpointError(f"{path}: not a {self.name} training state (*.{self.state_suffix})")
        check_state(Path(path), self.state_problem)


def one_device(trainer: Any) -> Any:
    """The recipe's trainer section for evaluation: its accelerator and precision, on one device
    of this process (a data-parallel strategy is for training; test metrics need no replicas)."""
    return trainer.model_copy(update={"devices": 1, "num_nodes": 1, "strategy": "auto"})


_LOADED: dict[str, Backend] = {}


def backend_for(framework: str) -> Backend:
    """The backend of a framework name (``torch`` is ``lightning``), imported on first use."""
    name = framework_name(framework)
    if name not in _LOADED:
        module, _, cls = BACKENDS[name].partition(":")
        _LOADED[name] = getattr(importlib.import_module(module), cls)()
    return _LOADED[name]


def backend_of_state(path: Path) -> Backend:
    """The backend that writes training states of ``path``'s kind (its suffix)."""
    for name in BACKENDS:
        if Path(path).suffix == f".{backend_for(name).state_suffix}":
            return backend_for(name)
    raise ValueError(f"{Path(path).name} is no backend's training state")


def framework_name(framework: str) -> str:
    """A framework name checked and normalised (``torch`` -> ``lightning``) without importing it."""
    name = normalize_framework(framework)
    if name not in BACKENDS:
        raise ValueError(f"framework {framework!r} is not one of: lightning (alias torch), keras")
    return name


# ------------------------------------------------------------------------- twins and files


def save_checkpoint(
    model: Any,
    path: str | Path,
    *,
    recipe: dict[str, Any] | None = None,
    metrics: dict[str, float] | None = None,
    vocab: str | None = None,
    dtype: str = "float32",
    preprocessing: Preprocessing | None = None,
) -> Path:
    """Export a zoo model (either twin) as the common checkpoint, recording the versions of its
    backend's libraries.

    ``vocab`` is a language model's characters in id order: without it the token ids
    of the checkpoint mean nothing, so it travels in the metadata. ``preprocessing``
    (zoo.preprocessing) is what the model's inputs went through: image size, mean and std,
    tokenizer, label names.
    """
    framework = framework_of(model)
    return write_checkpoint(
        path, model.zoo_config, tensors_to_save(model), framework=framework, recipe=recipe,
        metrics=metrics, vocab=vocab, dtype=dtype, preprocessing=preprocessing,
        packages=backend_for(framework).packages,
    )  # fmt: skip


def load_checkpoint(path: str | Path, framework: str = "lightning", architecture: str | None = None):
    """Build the twin of ``framework`` and load the checkpoint's weights into it."""
    backend = backend_for(framework)  # an unknown framework is refused before the file is read
    return backend.load(read_checkpoint(path, architecture))
