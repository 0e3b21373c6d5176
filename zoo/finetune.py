"""Starting a run from a common checkpoint of either framework (``init.from``).

The checkpoint's config is the base; the recipe may change what leaves the backbone's
tensors as they are (dropout, the data: class count, vocabulary, image size). Tensors whose
shape follows the data are re-initialised when the data changes them, and said so by name,
as are the tensors of a task the checkpoint did not have (a classifier and its pooler on a
masked language model's backbone); the old task's own tensors are left out, by name. Unless
the family carries them over: its ``adapt_tensors`` hook returns the tensors it can
bring to the new shapes (a learned position table resampled to another image size), and
those start from the checkpoint's values, also said by name. Any other difference (another
family, another width) is refused before training.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tables import TensorSpec, tensor_specs
from zoo.family import ArchitectureConfig, Family


@dataclass
class InitPlan:
    source: Path
    tensors: dict[str, np.ndarray]
    reinitialised: list[str] = field(default_factory=list)
    head: set[str] = field(default_factory=set)  # tensors that follow the data: the task head
    freeze_backbone: bool = False
    head_lr: float | None = None
    # Tensors the data re-shaped that the family's adapt_tensors hook carried over, at their new shapes.
    adapted: dict[str, np.ndarray] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # the checkpoint's task's tensors the new task lacks

    def describe(self) -> str:
        text = f"fine-tuning from {self.source}"
        if self.adapted:
            text += "; adapted to the data: " + ", ".join(
                f"{name} {list(self.tensors[name].shape)} -> {list(value.shape)}"
                for name, value in self.adapted.items()
            )
        if self.reinitialised:
            text += f"; re-initialised: {', '.join(self.reinitialised)}"
        if self.dropped:
            text += f"; left out (the checkpoint's task only): {', '.join(self.dropped)}"
        if self.freeze_backbone:
            text += f"; training only {', '.join(sorted(self.head))}"
        return text


def base_config(recipe, family: Family) -> tuple[Any, ArchitectureConfig]:
    """The checkpoint and the config to train: the checkpoint's, with the recipe's own
    explicit model fields on top and the data-decided fields left to the data."""
    checkpoint = read_checkpoint(recipe.init.from_)
    if checkpoint.family.name != family.name:
        raise CheckpointError(
            f"{recipe.init.from_}: is a {checkpoint.family.name!r} checkpoint, but the recipe trains a "
            f"{family.name!r} model; fine-tuning keeps the architecture"
        )
    data_fields = set(family.config.DATA_FIELDS)
    fields = checkpoint.config.model_dump(exclude=data_fields)
    user = recipe.model.model_dump(include=recipe.model.model_fields_set - data_fields - {"architecture"})
    return checkpoint, family.config.model_validate({**fields, **user})


def plan(recipe, family: Family, checkpoint, config: ArchitectureConfig) -> InitPlan:
    """Check every tensor of the checkpoint against ``config`` (already bound to the data)."""
    source = recipe.init.from_
    new = tensor_specs(family.weight_table(config))
    old = tensor_specs(family.weight_table(checkpoint.config))
    backbone_changes = _backbone_changes(family, checkpoint.config, config, new)
    if backbone_changes:
        raise CheckpointError(
            f"{source}: the recipe's model does not fit the checkpoint's backbone: "
            + "; ".join(backbone_changes[:5])
            + ". Only the data (class count, vocabulary) may change tensor shapes when fine-tuning; "
            + _fitting_overrides(recipe, family, checkpoint.config, config)
        )
    # Another task (from the data) keeps the backbone and swaps what is the task's own.
    added = {name for name in new if name not in old}
    dropped = [name for name in old if name not in new]
    head = head_tensors(family, config) | added
    reshaped = {name for name, spec in new.items() if name in old and old[name].shape != spec.shape}
    reset = head if recipe.init.reset_head else set()
    tensors = checkpoint.tensors()
    adapted = adapted_tensors(family, tensors, checkpoint.config, config, reshaped - reset, new)
    reinitialised = [name for name in new if name in (reshaped - set(adapted)) | reset | added]
    head |= set(reinitialised)  # what starts fresh trains, even under a frozen backbone
    return InitPlan(
        source=Path(source),
        tensors=tensors,
        reinitialised=reinitialised,
        head=head,
        freeze_backbone=recipe.init.freeze_backbone,
        head_lr=recipe.init.head_lr,
        adapted=adapted,
        dropped=dropped,
    )


def _backbone_changes(
    family: Family, old_config: ArchitectureConfig, config: ArchitectureConfig, new: dict[str, TensorSpec]
) -> list[str]:
    """The checkpoint's tensors that ``config`` shapes otherwise, the data aside."""
    old = tensor_specs(family.weight_table(old_config))
    data_fields = {k: getattr(old_config, k) for k in family.config.DATA_FIELDS}
    same_data = tensor_specs(family.weight_table(config.model_copy(update=data_fields)))
    return [
        f"{name} {list(spec.shape)} -> {list(new[name].shape) if name in new else 'absent'}"
        for name, spec in old.items()
        if name not in same_data or same_data[name].shape != spec.shape
    ] + [f"{name} (new)" for name in same_data if name not in old]


def _fitting_overrides(
    recipe, family: Family, old_config: ArchitectureConfig, config: ArchitectureConfig
) -> str:
    """The ``--set`` options that make the recipe's model the checkpoint's: the recipe's model
    fields (its own or its preset's) that differ from the checkpoint's, fewest that fit. A shipped
    recipe names a preset, so "remove the fields" alone would leave the user searching."""
    ignored = {"architecture", "preset", *family.config.DATA_FIELDS}
    differing = {
        name: getattr(old_config, name)
        for name in sorted(recipe.model.model_fields_set - ignored)
        if getattr(config, name) != getattr(old_config, name)
    }

    def fits(reverted: dict[str, Any]) -> bool:
        try:
            candidate = family.config.model_validate({**config.model_dump(), **reverted})
        except ValueError:  # fields that only validate together (heads that divide a width)
            return False
        return not _backbone_changes(
            family, old_config, candidate, tensor_specs(family.weight_table(candidate))
        )

    if not differing or not fits(differing):
        return "remove the model fields that change the architecture."
    needed = dict(differing)
    for name in differing:  # drop what is not needed to fit, one at a time
        trial = {k: v for k, v in needed.items() if k != name}
        if fits(trial):
            needed = trial
    options = [f"--set {shlex.quote(f'model.{k}={_yaml_value(v)}')}" for k, v in needed.items()]
    return f"to train the checkpoint's model, add: {' '.join(options)}."


def _yaml_value(value: Any) -> str:
    """A value as ``--set`` reads it back (YAML): JSON for numbers, lists and null, a plain word
    for a string that YAML would not read as something else."""
    if isinstance(value, str) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value, separators=(",", ":"))


def adapted_tensors(
    family: Family,
    tensors: dict[str, np.ndarray],
    old_config: ArchitectureConfig,
    new_config: ArchitectureConfig,
    reshaped: set[str],
    specs: dict[str, TensorSpec],
) -> dict[str, np.ndarray]:
    """What the family's ``adapt_tensors`` hook carries over of the ``reshaped`` tensors, each
    checked against the new config's shape (a hook that returns anything else is a bug in the
    family, named as such)."""
    if family.adapt_tensors is None or not reshaped:
        return {}
    carried = family.adapt(tensors, old_config, new_config)
    adapted = {}
    for name, value in carried.items():
        if name not in reshaped:
            raise ValueError(
                f"{family.adapt_tensors} returned {name!r}, which the new data does not re-shape "
                f"(it may return only: {', '.join(sorted(reshaped))})"
            )
        if tuple(np.shape(value)) != specs[name].shape:
            raise ValueError(
                f"{family.adapt_tensors} returned {name!r} with shape {list(np.shape(value))}; the new "
                f"config needs {list(specs[name].shape)}"
            )
        adapted[name] = np.asarray(value, dtype=specs[name].dtype)
    return {name: adapted[name] for name in specs if name in adapted}  # in state_dict order


def head_tensors(family: Family, config: ArchitectureConfig) -> set[str]:
    """The tensors whose shape follows what the task predicts: the classes, or for a language
    model the vocabulary (its embedding and output). A classifier's token embedding is backbone."""
    predicts = "vocab_size" if config.active_task.endswith("language_modeling") else "num_classes"
    sizes = {predicts} & set(family.config.DATA_FIELDS)
    grown = {key: getattr(config, key) + 1 for key in sizes}
    if not grown:
        return set()
    base = tensor_specs(family.weight_table(config))
    other = tensor_specs(family.weight_table(config.model_copy(update=grown)))
    return {name for name, spec in base.items() if other[name].shape != spec.shape}


def merged_tensors(plan: InitPlan, fresh: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checkpoint's tensors, except those the data re-shaped: the family's adapted ones where
    it carried them over, the fresh init where it did not."""
    return {
        name: fresh[name] if name in plan.reinitialised else plan.adapted.get(name, plan.tensors[name])
        for name in fresh
    }
