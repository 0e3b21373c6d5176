"""Reading a recipe: YAML (or a dict), ``--set`` overrides, validation, errors by field."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from zoo.recipe.bases import read_recipe_file, resolve_bases
from zoo.recipe.errors import RecipeError, describe
from zoo.recipe.overrides import apply_override
from zoo.recipe.schema import Recipe, text_problem


def load_recipe(path: str | Path | dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (or a dict), merge it over its ``base`` chain (zoo.recipe.bases), apply
    ``a.b=value`` overrides, validate once."""
    return load_recipe_chain(path, overrides)[0]


def load_recipe_chain(
    path: str | Path | dict[str, Any], overrides: list[str] | tuple[str, ...] = ()
) -> tuple[Recipe, list[str]]:
    """:func:`load_recipe`, and the files of the recipe's ``base`` chain (the deepest base first;
    empty for a recipe without one), which ``zoo validate --show`` names."""
    if isinstance(path, dict):
        source = "<recipe>"
        raw, bases = resolve_bases(copy.deepcopy(path), None, source)
    else:
        source = str(path)
        path = Path(path)
        raw, bases = resolve_bases(read_recipe_file(path, source), path, source)
        # A file name that is not UTF-8 (its bytes kept as surrogates): its text, for the runs' folders.
        raw.setdefault("name", path.stem.encode(errors="surrogateescape").decode(errors="replace"))
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
        recipe = Recipe.model_validate(raw)
    except ValidationError as error:
        raise RecipeError(source, [describe(e, raw) for e in error.errors()]) from None
    problems = coerced_numbers(raw, recipe)
    if problems:
        raise RecipeError(source, problems)
    return recipe, bases


def coerced_numbers(raw: Any, value: Any, path: str = "") -> list[str]:
    """Numbers are strict: pydantic's lax mode reads ``batch_size: true`` as 1, ``"8"`` as 8 and
    ``max_epochs: 2.5``... as an error but ``2.0`` as 2. Compared after validation, value by value
    against what the user wrote (strict mode itself would also refuse text for paths and lists
    for tuples, which a YAML recipe can only write that way)."""
    if isinstance(raw, dict) and isinstance(value, BaseModel):
        fields = {(f.alias or n): n for n, f in type(value).model_fields.items()}
        return [
            p
            for key, item in raw.items()
            if key in fields or key in type(value).model_fields
            for p in coerced_numbers(item, getattr(value, fields.get(key, key)), f"{path}{key}.")
        ]
    if isinstance(raw, list) and isinstance(value, list | tuple) and len(raw) == len(value):
        return [
            p
            for i, (r, v) in enumerate(zip(raw, value, strict=True))
            for p in coerced_numbers(r, v, f"{path}{i}.")
        ]
    where = path.rstrip(".")
    if isinstance(value, bool) and not isinstance(raw, bool):
        return [f"{where}: needs true or false (got {raw!r})"]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and isinstance(raw, bool):
        return [f"{where}: needs a number, not true/false (got {raw!r}); write the number itself"]
    if number and isinstance(raw, str):
        return [f"{where}: needs a number, not quoted text (got {raw!r}); write the number without quotes"]
    if isinstance(value, int) and not isinstance(value, bool) and isinstance(raw, float):
        return [f"{where}: needs a whole number (got {raw!r}); write it without a decimal point"]
    return []


def plain_data_problems(node: Any, path: str = "") -> list[str]:
    """What a recipe cannot hold, wherever it is: a non-finite number (no field has a use for
    ``.inf`` or ``.nan``), a key that is not text, text that is not Unicode (a lone surrogate), a
    YAML date, binary or set."""
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
    if isinstance(node, str) and text_problem(node):  # a file name, JSON, a log line would refuse it
        return [f"{where}: {text_problem(node)}"]
    if node is None or isinstance(node, str | int | float):
        return []
    return [
        f"{where}: a YAML {type(node).__name__} ({node!r:.40}) is not a recipe value; "
        "quote it if you meant text"
    ]
