"""The registry of architecture families and their named presets.

Families are found through the ``zoo.architectures`` entry point group, so a package
outside this repository adds one by declaring an entry point; nothing here names a
family.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from zoo.family import ArchitectureConfig, Family, Preset
from zoo.weights import count_parameters

GROUP = "zoo.architectures"


class UnknownArchitectureError(KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@functools.cache
def families() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        family = ep.load()
        if not isinstance(family, Family):
            raise TypeError(f"entry point {GROUP}:{ep.name} is {type(family)}, not a zoo Family")
        if family.name in found:
            raise ValueError(f"two packages register the architecture family {family.name!r}")
        found[family.name] = family
    if not found:
        raise RuntimeError(
            f"no architecture families are registered under the entry point group {GROUP!r}; "
            "install zoo (pip install -e .) so its entry points exist"
        )
    return found


@functools.cache
def presets() -> dict[str, tuple[Family, Preset]]:
    found: dict[str, tuple[Family, Preset]] = {}
    for family in families().values():
        for preset in family.presets:
            if preset.name in found or preset.name in families():
                raise ValueError(f"preset name {preset.name!r} is registered twice")
            found[preset.name] = (family, preset)
    return found


def names() -> list[str]:
    return [*families(), *presets()]


def get_family(name: str) -> Family:
    """The family of a family name or a preset name."""
    if name in families():
        return families()[name]
    if name in presets():
        return presets()[name][0]
    raise UnknownArchitectureError(
        f"{name!r} is not a registered architecture or preset; known: {', '.join(names())}"
    )


def expand(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Raw config fields for a family or preset name, with ``overrides`` on top."""
    family = get_family(name)
    fields: dict[str, Any] = {}
    if name in presets():
        fields.update(presets()[name][1].fields)
        fields["preset"] = name
    fields.update(overrides or {})
    fields["architecture"] = family.name
    return fields


def resolve_config(name: str, **overrides: Any) -> ArchitectureConfig:
    family = get_family(name)
    return family.config.model_validate(expand(name, overrides))


@dataclass(frozen=True)
class Entry:
    name: str
    family: str
    kind: str  # "family" or "preset"
    tasks: tuple[str, ...]
    parameters: int
    description: str
    frameworks: tuple[str, ...] = ("lightning", "keras")


def list_architectures() -> list[Entry]:
    """Every family (at its default config) and every preset, with parameter counts."""
    entries = []
    for family in families().values():
        config = family.config.model_validate({"architecture": family.name})
        entries.append(_entry(family.name, family, "family", config, family.description))
    for name, (family, preset) in presets().items():
        entries.append(_entry(name, family, "preset", resolve_config(name), preset.description))
    return entries


def _entry(name, family: Family, kind, config, description) -> Entry:
    params = count_parameters(family.weight_table(config))
    return Entry(name, family.name, kind, family.tasks, params, description)
