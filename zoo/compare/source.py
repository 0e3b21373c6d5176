"""What a comparison starts from: a recipe (its seed's init, or its ``init.from``), or a user's
checkpoint with the recipe and data to compare it on.

A checkpoint is compared as a fine-tune start: the recipe's ``init.from`` is the checkpoint, so
both twins load its tensors (those the data re-shapes, a new head, start from the seed as in
``zoo finetune``). The model is the checkpoint's; the recipe gives the data, optimizer and
trainer: ``--recipe`` when given, else the recipe of the run folder the checkpoint is in, else
the recipe recorded in the checkpoint. An imported checkpoint has none, so it needs ``--recipe``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from zoo import registry
from zoo.checkpoint import CheckpointError, read_checkpoint
from zoo.recipe import Recipe, RecipeError, load_recipe

log = logging.getLogger("zoo")
CHECKPOINT_SUFFIX = ".safetensors"


def is_checkpoint(path: str | Path) -> bool:
    """A checkpoint file, or a run folder holding one (``model.safetensors``)."""
    path = Path(path)
    return path.suffix == CHECKPOINT_SUFFIX or (path / "model.safetensors").is_file()


def checkpoint_recipe(
    checkpoint: str | Path,
    recipe: Recipe | str | Path | dict | None = None,
    data: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> Recipe:
    """The recipe that compares ``checkpoint``: its model, ``init.from`` set to it, the data of
    ``data`` (a data source's name, or a YAML file holding a ``data`` section) when given, then
    ``overrides``."""

    path = Path(checkpoint)
    if path.is_dir():
        path = path / "model.safetensors"
    found = read_checkpoint(path)
    raw, where = _base(found, recipe)
    family = found.family.name
    stated = raw.get("model", {}).get("architecture")
    if stated is not None and registry.get_family(stated).name != family:
        raise RecipeError(where, [
            f"model.architecture: {stated!r} is not a {family} model, and {path} is a {family!r} "
            f"checkpoint; give --recipe a recipe whose data and task suit {family}"
        ])  # fmt: skip
    if set(raw.get("model", {})) - {"architecture"}:
        log.info(f"comparing the model of {path}; the model fields of {where} are not used")
    raw["model"] = {"architecture": family}  # the checkpoint's own config is the base
    raw["init"] = {"from": str(path)}
    if data is not None:
        raw["data"] = data_section(data, raw.get("data", {}))
    return load_recipe(raw, overrides)


def _base(found, recipe: Recipe | str | Path | dict | None) -> tuple[dict[str, Any], str]:
    """The raw recipe to compare on, and its name for messages."""
    if isinstance(recipe, dict):
        return dict(recipe), "the recipe"
    if recipe is not None:
        return _as_set(recipe if isinstance(recipe, Recipe) else load_recipe(recipe)), str(recipe)
    folder = found.path.parent / "recipe.yaml"
    if folder.is_file():
        return _as_set(load_recipe(folder)), str(folder)
    recorded = found.json("recipe") or {}
    if recorded:
        return recorded, f"the recipe recorded in {found.path}"
    raise CheckpointError(
        f"{found.path} carries no recipe (an imported checkpoint) and its folder has no recipe.yaml; "
        f"give --recipe R (a recipe with the data to compare a {found.family.name} model on)"
    )


def _as_set(recipe: Recipe) -> dict[str, Any]:
    """The fields the recipe sets (defaults stay defaults, model fields stay the checkpoint's)."""
    return recipe.model_dump(mode="json", by_alias=True, exclude_unset=True)


def data_section(data: str | Path, current: dict[str, Any]) -> dict[str, Any]:
    """``--data``: a YAML file's ``data`` section (or the file is the section), or a data
    source's name with its defaults; the batch settings of the recipe's data carry over."""
    from zoo.recipe.overrides import read_yaml

    path = Path(data)
    if path.is_file():
        section = read_yaml(path.read_text())
        section = section.get("data", section) if isinstance(section, dict) else section
        if not isinstance(section, dict):
            raise RecipeError(f"--data {path}", ["holds no data section; give a mapping with a 'name'"])
    else:
        section = {"name": str(data)}
    kept = {k: current[k] for k in ("batch_size", "eval_batch_size", "shuffle") if k in current}
    return {**kept, **section}
