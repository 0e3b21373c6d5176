"""Rendering validation errors for people: one line per problem, with the field path as
the user wrote it, the value given, and what is allowed (the keys of the section the
recipe picked, for a misspelt key)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from zoo import registry
from zoo.limits import MAX_SHOWN_PROBLEMS
from zoo.recipe.schema import Recipe


class RecipeError(ValueError):
    """A recipe that cannot be used: every problem, each with its field path."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems  # every one; the message shows the first MAX_SHOWN_PROBLEMS
        lines = [f"  {p}" for p in problems[:MAX_SHOWN_PROBLEMS]]
        if len(problems) > MAX_SHOWN_PROBLEMS:
            lines.append(f"  ... and {len(problems) - MAX_SHOWN_PROBLEMS:,} more")
        super().__init__(f"{source}: {len(problems):,} problem(s)\n" + "\n".join(lines))


_UNIONS = ("model", "data", "optimizer", "schedule")


def describe(error: dict[str, Any], raw: dict[str, Any]) -> str:
    """One line per error: the field path, what is wrong, the value given, what is allowed."""
    loc = list(error["loc"])
    if len(loc) > 1 and loc[0] in _UNIONS and loc[1] in _tags(loc[0]):
        del loc[1]  # pydantic puts the union member's tag in the path; users never wrote it
    path = ".".join(str(p) for p in loc) or "recipe"
    message = error["msg"].removeprefix("Value error, ")
    sections = "|".join(Recipe.model_fields)
    named = re.match(rf"((?:{sections})\.[\w.]+) (.*)", message, re.DOTALL)
    if named and error["type"] == "value_error":
        path, message = named.groups()  # a check across fields names the field it is about
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], raw)
        message = "unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
        return f"{path}: {message}"
    if error["type"] in ("missing",):
        return f"{path}: {message}"
    given = error.get("input")
    if error["type"] in ("int_type", "float_type") and isinstance(given, bool | str):
        kind = "an integer" if error["type"] == "int_type" else "a number"
        what = "true/false" if isinstance(given, bool) else "quoted text"
        return f"{path}: needs {kind}, not {what} (got {given!r}); write the number itself, without quotes"
    quoted = error["type"] == "value_error" and repr(given) in message
    if isinstance(given, dict | list) or given is None or quoted:
        return f"{path}: {message}"
    return f"{path}: {message} (got {given!r})"


def _tags(section: str) -> set[str]:
    if section == "model":
        return set(registry.families())
    annotation = Recipe.model_fields[section].annotation
    return {m.model_fields["name"].default for m in annotation.__args__}


def _tag_of(section: str, value: dict[str, Any]) -> Any:
    if section == "model":
        name = value.get("architecture")
        try:
            return registry.get_family(name).name if isinstance(name, str) else name
        except registry.UnknownArchitectureError:
            return name
    return value.get("name")


def _allowed_keys(loc: list[Any], raw: dict[str, Any]) -> list[str]:
    """Field names of the section at ``loc``, following the union member the recipe picked."""
    cls: Any = Recipe
    node: Any = raw
    for part in loc:
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            return []
        field = cls.model_fields.get(part)
        node = node.get(part, {}) if isinstance(node, dict) else {}
        if field is None:
            return []
        cls = _member(field.annotation, part, node)
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return [f.alias or n for n, f in cls.model_fields.items()]
    return []


def _member(annotation: Any, section: str, node: Any) -> Any:
    members = getattr(annotation, "__args__", None)
    if not members:
        return annotation
    tag = _tag_of(section, node) if isinstance(node, dict) else None
    if tag is None and section != "model":
        tag = Recipe.model_fields[section].default_factory().name
    for member in members:
        if not (isinstance(member, type) and issubclass(member, BaseModel)):
            continue
        key = "architecture" if section == "model" else "name"
        field = member.model_fields.get(key)
        if field is not None and field.default == tag:
            return member
    return members[0]
