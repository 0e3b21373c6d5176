"""Recipe files and their ``base:``: one recipe built on another.

``base: other.yaml`` (a path relative to the recipe's own file) names the recipe this one starts
from. The base is read first (its own ``base`` too: chains are allowed), then this recipe is merged
over it: mappings merge key by key, lists and scalars replace. A section that picks another kind
(``optimizer.name``, ``schedule.name``, ``data.name``, ``model.architecture``) replaces the base's
section whole, so the fields of the base's kind never land in the new one. The merged recipe is
validated once, as one recipe; what a run keeps (``recipe.yaml``, the checkpoint's metadata) is
that resolved recipe, which names no base.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from zoo.limits import MAX_RECIPE_BYTES
from zoo.recipe.errors import RecipeError
from zoo.recipe.overrides import RefusedYAML, read_yaml

KINDS = ("name", "architecture")  # the keys that pick a section's kind (its discriminator)
MAX_BASES = 32  # a chain longer than this is a mistake, not a design


def read_recipe_file(path: Path, source: str) -> dict[str, Any]:
    """The raw mapping of one recipe file (its ``base`` not resolved), or a RecipeError naming it."""
    if not path.is_file():
        raise RecipeError(source, ["no such file; recipes live in recipes/ (e.g. recipes/cnn-digits.yaml)"])
    size = path.stat().st_size
    if size > MAX_RECIPE_BYTES:
        raise RecipeError(source, [f"{size:,} bytes; a recipe is at most {MAX_RECIPE_BYTES:,} bytes"])
    try:
        raw = read_yaml(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as error:
        raise RecipeError(
            source, [f"not UTF-8 text (byte {error.start}: {error.reason}); save the recipe as UTF-8"]
        ) from None
    except RefusedYAML as error:
        raise RecipeError(source, [str(error)]) from None
    except yaml.YAMLError as error:
        raise RecipeError(source, [f"not valid YAML: {error}"]) from None
    if not isinstance(raw, dict):
        raise RecipeError(source, ["a recipe is a YAML mapping of sections (model, data, ...)"])
    return raw


def resolve_bases(raw: dict[str, Any], here: Path | None, source: str) -> tuple[dict[str, Any], list[str]]:
    """``raw`` merged over the chain of its bases, and the files of that chain (the base of
    ``raw`` first). ``here``: the recipe's file (None for a recipe given as a dict: a base is then
    relative to the current directory). A missing base, a cycle or a ``base`` that is not a file
    name is refused in one line naming the files."""
    chain: list[Path] = [here.resolve()] if here is not None else []
    layers = [raw]
    while "base" in layers[-1]:
        named = layers[-1].pop("base")
        writer = str(chain[-1]) if chain else source
        if not isinstance(named, str) or not named.strip():
            raise RecipeError(source, [f"base in {writer}: needs a recipe file name (got {named!r})"])
        folder = chain[-1].parent if chain else Path.cwd()
        path = (folder / named).resolve()
        if path in chain:
            cycle = " -> ".join(str(p) for p in [*chain[chain.index(path) :], path])
            problem = f"base: recipes build on each other in a cycle: {cycle}; remove one base"
            raise RecipeError(source, [problem])
        if not path.is_file():
            raise RecipeError(source, [f"base {named!r} in {writer}: no such file ({path})"])
        if len(chain) > MAX_BASES:
            raise RecipeError(source, [f"base: more than {MAX_BASES} recipes in one chain ({writer})"])
        try:
            base = read_recipe_file(path, str(path))
        except RecipeError as error:  # the base's own problem, said with its file and the one naming it
            problems = [f"base {path} (named in {writer}): {p}" for p in error.problems]
            raise RecipeError(source, problems) from None
        base.pop("name", None)  # a recipe's name is its own (or its file's): it names the runs
        chain.append(path)
        layers.append(base)
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged = deep_merge(merged, layer)
    return merged, [str(p) for p in reversed(chain[1:] if here is not None else chain)]


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``: mappings merge key by key (unless ``over`` picks
    another kind of section, see the module's docstring), lists and scalars replace."""
    if any(k in over and k in base and over[k] != base[k] for k in KINDS):
        return copy.deepcopy(over)
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
