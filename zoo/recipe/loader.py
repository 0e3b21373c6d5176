"""Reading a recipe: YAML (or a dict), ``--set`` overrides, validation, errors by field."""

from __future__ import annotations

import copy
import json
import math
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
    problems = plain_data_problems(raw)
    if problems:
        raise RecipeError(source, problems)
    try:
        # Strict, from JSON: numbers are numbers (``batch_size: true`` or ``"8"`` is refused,
        # not read as 1 or 8), while text still becomes a path and a list a tuple.
        return Recipe.model_validate_json(json.dumps(raw), strict=True)
    except ValidationError as error:
        raise RecipeError(source, [describe(e, raw) for e in error.errors()]) from None


def plain_data_problems(node: Any, path: str = "") -> list[str]:
    """What a recipe cannot hold, wherever it is: a non-finite number (no field has a use for
    ``.inf`` or ``.nan``), a key that is not text, a YAML date, binary or set."""
    where = path or "recipe"
    if isinstance(node, dict):
        problems = []
        for key, value in node.items():
            if not isinstance(key, str):
                problems.append(f"{where}: the key {key!r} is not text; field names are words")
                continue
            problems += plain_data_problems(value, f"{path}.{key}" if path else key)
        return problems
    if isinstance(node, list):
        return [p for i, item in enumerate(node) for p in plain_data_problems(item, f"{where}.{i}")]
    if isinstance(node, float) and not math.isfinite(node):
        return [f"{where}: {node} is not a finite number; give a finite value"]
    if node is None or isinstance(node, str | int | float):
        return []
    return [
        f"{where}: a YAML {type(node).__name__} ({node!r:.40}) is not a recipe value; "
        "quote it if you meant text"
    ]
