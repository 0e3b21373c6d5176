"""Reading a recipe: YAML (or a dict), ``--set`` overrides, validation, errors by field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from zoo.recipe.errors import RecipeError, describe
from zoo.recipe.overrides import apply_override, read_yaml
from zoo.recipe.schema import Recipe


def load_recipe(path: str | Path | dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (or a dict), apply ``a.b=value`` overrides, validate."""
    if isinstance(path, dict):
        raw, source = copy.deepcopy(path), "<recipe>"
    else:
        source = str(path)
        path = Path(path)
        if not path.is_file():
            raise RecipeError(
                source, ["no such file; recipes live in recipes/ (e.g. recipes/cnn-digits.yaml)"]
            )
        try:
            raw = read_yaml(path.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as error:
            raise RecipeError(
                source, [f"not UTF-8 text (byte {error.start}: {error.reason}); save the recipe as UTF-8"]
            ) from None
        except yaml.YAMLError as error:
            raise RecipeError(source, [f"not valid YAML: {error}"]) from None
        if not isinstance(raw, dict):
            raise RecipeError(source, ["a recipe is a YAML mapping of sections (model, data, ...)"])
        raw.setdefault("name", path.stem)
    problems = []
    for item in overrides:
        try:
            apply_override(raw, item)
        except ValueError as error:
            problems.append(str(error))
    if problems:
        raise RecipeError(source, problems)
    try:
        return Recipe.model_validate(raw)
    except ValidationError as error:
        raise RecipeError(source, [describe(e, raw) for e in error.errors()]) from None
