"""What a comparison starts from: a recipe (its seed's init, or its ``init.from``), or a user's
checkpoint with the recipe and data to compare it on.

A checkpoint is compared as a fine-tune start: the recipe's ``init.from`` is the checkpoint, so
both twins load its tensors (those the data re-shapes, a new head, start from the seed as in
``zoo finetune``). The model is the checkpoint's; the recipe gives the data, optimizer and
trainer: ``--recipe`` when given, else the recipe of the run folder the checkpoint is in, else
the recipe recorded in the checkpoint. An imported checkpoint has none, so it needs ``--recipe``.

A LoRA adapter (zoo.lora) is compared on its base: ``init.from`` is the base it names (or its
seed's init), ``init.lora`` its settings, and both twins hold its A, B and trained biases. The
base is checked as ``zoo merge`` and ``zoo.lora.load_adapter`` check it, with their messages.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from zoo import registry
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.errors import DataError
from zoo.limits import special_file_problem
from zoo.lora import AdapterFile, base_of, is_adapter, read_adapter
from zoo.recipe import Recipe, RecipeError, load_recipe
from zoo.recipe.fine_tuning import LoraConfig
from zoo.recipe.overrides import read_yaml

log = logging.getLogger("zoo")
CHECKPOINT_SUFFIX = ".safetensors"


RUN_FILES = ("model.safetensors", "adapter.safetensors")  # what a run folder's checkpoint is called


def is_checkpoint(path: str | Path) -> bool:
    """A checkpoint or adapter file, or a run folder holding one."""
    path = Path(path)
    return path.suffix == CHECKPOINT_SUFFIX or any((path / name).is_file() for name in RUN_FILES)


def checkpoint_file(path: str | Path) -> Path:
    """The file of a checkpoint given as a file or as the run folder holding it."""
    path = Path(path)
    if not path.is_dir():
        return path
    return next((path / name for name in RUN_FILES if (path / name).is_file()), path / RUN_FILES[0])


def adapter_of(target: Any) -> AdapterFile | None:
    """The LoRA adapter ``target`` (a path: a file or a run folder) is, or None for anything else."""
    if not isinstance(target, str | Path):
        return None
    path = checkpoint_file(target)
    return read_adapter(path) if path.is_file() and is_adapter(path) else None


def checkpoint_recipe(
    checkpoint: str | Path,
    recipe: Recipe | str | Path | dict | None = None,
    data: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> Recipe:
    """The recipe that compares ``checkpoint``: its model, ``init.from`` set to it (an adapter's:
    its base, and ``init.lora``), the data of ``data`` (a data source's name, or a YAML file
    holding a ``data`` section) when given, then ``overrides``."""

    path = checkpoint_file(checkpoint)
    adapter = adapter_of(path)
    if adapter is not None:
        base_of(adapter)  # a base that is missing or not the adapter's is refused now, before any work
        family, recorded = adapter.family.name, json.loads(adapter.metadata.get("recipe", "{}"))
    else:
        found = read_checkpoint(path)
        family, recorded = found.family.name, found.json("recipe") or {}
    raw, where = _base(path, family, recorded, recipe)
    stated = raw.get("model", {}).get("architecture")
    if stated is not None and registry.get_family(stated).name != family:
        raise RecipeError(where, [
            f"model.architecture: {stated!r} is not a {family} model, and {path} is a {family!r} "
            f"checkpoint; give --recipe a recipe whose data and task suit {family}"
        ])  # fmt: skip
    if set(raw.get("model", {})) - {"architecture"}:
        log.info(f"comparing the model of {path}; the model fields of {where} are not used")
    if adapter is not None:
        raw.update(_adapter_sections(adapter, raw.get("trainer", {})))
    else:
        raw["model"] = {"architecture": family}  # the checkpoint's own config is the base
        raw["init"] = {"from": str(path)}
    if data is not None:
        raw["data"] = data_section(data, raw.get("data", {}))
    return load_recipe(raw, overrides)


def _adapter_sections(adapter: AdapterFile, trainer: dict[str, Any]) -> dict[str, Any]:
    """The model, init and trainer sections that put ``adapter`` on its base: the adapter's config
    (the base's, with the dropout it trained with; the data fills in the rest), its base as
    ``init.from`` (a seed's init: that seed), and its LoRA settings."""
    config = adapter.config
    model = config.model_dump(mode="json", exclude=set(config.DATA_FIELDS))
    settings = {k: v for k, v in adapter.adapter.settings.items() if k in LoraConfig.model_fields}
    init: dict[str, Any] = {"lora": {**settings, "target": [p.name for p in adapter.adapter.points]}}
    base = adapter.base
    if base.get("path"):
        init["from"] = base["path"]
    else:
        trainer = {**trainer, "seed": int(base["seed"])}
    return {"model": model, "init": init, "trainer": trainer}


def _base(
    path: Path, family: str, recorded: dict[str, Any], recipe: Recipe | str | Path | dict | None
) -> tuple[dict[str, Any], str]:
    """The raw recipe to compare on, and its name for messages."""
    if isinstance(recipe, dict):
        return dict(recipe), "the recipe"
    if recipe is not None:
        return _as_set(recipe if isinstance(recipe, Recipe) else load_recipe(recipe)), str(recipe)
    folder = path.parent / "recipe.yaml"
    if folder.is_file():
        return _as_set(load_recipe(folder)), str(folder)
    if recorded:
        return recorded, f"the recipe recorded in {path}"
    raise CheckpointError(
        f"{path} carries no recipe (an imported checkpoint) and its folder has no recipe.yaml; "
        f"give --recipe R (a recipe with the data to compare a {family} model on)"
    )


def _as_set(recipe: Recipe) -> dict[str, Any]:
    """The fields the recipe sets (defaults stay defaults, model fields stay the checkpoint's)."""
    return recipe.model_dump(mode="json", by_alias=True, exclude_unset=True)


def data_section(data: str | Path, current: dict[str, Any]) -> dict[str, Any]:
    """``--data``: a YAML file's ``data`` section (or the file is the section), or a data
    source's name with its defaults; the batch settings of the recipe's data carry over."""
    path = Path(data)
    problem = special_file_problem(path)
    if problem is not None:  # a FIFO would block the read below
        raise DataError(f"--data {problem}")
    if path.is_file():
        section = read_yaml(path.read_text())
        section = section.get("data", section) if isinstance(section, dict) else section
        if not isinstance(section, dict):
            raise RecipeError(f"--data {path}", ["holds no data section; give a mapping with a 'name'"])
    else:
        section = {"name": str(data)}
    kept = {k: current[k] for k in ("batch_size", "eval_batch_size", "shuffle") if k in current}
    return {**kept, **section}
