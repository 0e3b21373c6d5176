"""The registry of architecture families and their named presets.

Families are found through the ``zoo.architectures`` entry point group, so a package
outside this repository adds one by declaring an entry point; nothing here names a
family. An entry point that cannot be imported, or whose family does not fill the contract,
is skipped with a one-line warning naming its package: one broken plugin does not take down
every command, and a recipe or command that names its family says why it is unavailable.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal, get_args, get_origin

from zoo.checkpoint.foreign import ForeignFormat
from zoo.checkpoint.tables import Port, count_parameters
from zoo.family import FRAMEWORKS, TASKS, ArchitectureConfig, Family, InputKind, InputSpec, Preset

GROUP = "zoo.architectures"
log = logging.getLogger("zoo")


class UnknownArchitectureError(KeyError):
    """A name that is no installed family or preset (or a family that failed to load); the
    message lists the known names or says why the family is unavailable."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class FamilyContractError(TypeError):
    """A registered family that does not fill the contract of :class:`zoo.family.Family`."""


@functools.cache
def families() -> dict[str, Family]:
    """Every family that loads, by name. Those that do not are skipped, said once (a warning on
    stderr) and kept in :func:`unavailable` with the reason."""
    found: dict[str, Family] = {}
    _UNAVAILABLE.clear()
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            family = load_family(ep)
        except FamilyContractError as error:
            _UNAVAILABLE[ep.name] = f"{error}; {remove_hint(ep)}"
            log.warning(f"warning: skipping the architecture family {ep.name!r}: {one_line(str(error))}. "
                        f"The other families work; {remove_hint(ep)}")  # fmt: skip
            continue
        if family.name in found:
            raise ValueError(f"two packages register the architecture family {family.name!r}")
        found[family.name] = family
    if not found:
        raise RuntimeError(
            f"no architecture families are registered under the entry point group {GROUP!r}; "
            "install zoo (pip install -e .) so its entry points exist"
        )
    return found


def families_reading(*kinds: str) -> str:
    """The registered families whose twins read ``kinds`` of input, for an error's "use ...":
    taken from the registry, so a message never names a family that is not installed."""
    names = [name for name, family in families().items() if family.inputs.kind in kinds]
    return ", ".join(names) if names else "none is installed"


_UNAVAILABLE: dict[str, str] = {}  # entry point name -> why its family is not in families()


def unavailable() -> dict[str, str]:
    """The families whose entry point is installed but did not load, and why."""
    families()
    return dict(_UNAVAILABLE)


def remove_hint(ep: EntryPoint) -> str:
    """What ends a broken plugin's errors: the package to fix or uninstall."""
    dist = getattr(ep, "dist", None)
    uninstall = f"pip uninstall {dist.name}" if dist is not None else "uninstall the package that declares it"
    return f"fix the package or remove it ({uninstall})"


def one_line(message: str) -> str:
    """A contract error's list of problems (or an import error's lines) on one line."""
    return " ".join(message.replace(":\n  - ", ": ").replace("\n  - ", "; ").split())


def plugin_name(ep: EntryPoint) -> str:
    """An entry point as a message names it: group, name, target and the package declaring it."""
    dist = getattr(ep, "dist", None)
    source = f" of the package {dist.name!r}" if dist is not None else ""
    return f"entry point {GROUP}:{ep.name} = {ep.value!r}{source}"


def load_family(ep: EntryPoint) -> Family:
    """Import one entry point and check that it fills the family contract."""
    try:
        family = ep.load()
    except Exception as error:
        raise FamilyContractError(
            f"{plugin_name(ep)} cannot be imported: {type(error).__name__}: {error}"
        ) from error
    if not isinstance(family, Family):
        raise FamilyContractError(f"{plugin_name(ep)} is a {type(family).__name__}, not a zoo.family.Family")
    problems = check_family(family)
    if problems:
        raise FamilyContractError(
            f"{plugin_name(ep)} does not fill the family contract:\n"
            + "\n".join(f"  - {problem}" for problem in problems)
        )
    return family


def check_family(family: Family) -> list[str]:
    """Every piece of the contract that ``family`` misses or declares with the wrong type,
    each as "<piece>: <what is wrong>". Imports no deep-learning framework."""
    problems: list[str] = []
    if not isinstance(family.name, str) or not family.name.isidentifier():
        problems.append(f"name: {family.name!r} is not an identifier-like string")
    if not isinstance(family.description, str) or not family.description:
        problems.append("description: missing (a one-line string)")
    if not isinstance(family.inputs, InputSpec):
        problems.append(f"inputs: {family.inputs!r} is not a zoo.family.InputSpec")
    elif family.inputs.kind not in get_args(InputKind):
        problems.append(f"inputs: kind {family.inputs.kind!r} is not one of {get_args(InputKind)}")
    if not isinstance(family.tasks, tuple) or not family.tasks or set(family.tasks) - set(TASKS):
        problems.append(f"tasks: {family.tasks!r} is not a non-empty tuple of {TASKS}")
    for piece in ("torch_model", "keras_model"):
        if not _is_target(getattr(family, piece)):
            problems.append(f"{piece}: {getattr(family, piece)!r} is not a 'module:callable' string")
    if family.adapt_tensors is not None and not _is_target(family.adapt_tensors):
        problems.append(f"adapt_tensors: {family.adapt_tensors!r} is not None or a 'module:callable' string")
    problems += _check_formats(family.formats)
    if not isinstance(family.grad_checkpointing, tuple) or set(family.grad_checkpointing) - set(FRAMEWORKS):
        problems.append(f"grad_checkpointing: {family.grad_checkpointing!r} is not a tuple of {FRAMEWORKS}")
    if not callable(family.weight_table):
        problems.append(f"weight_table: {family.weight_table!r} is not callable (config -> list[Port])")
    if not isinstance(family.presets, tuple) or not all(isinstance(p, Preset) for p in family.presets):
        problems.append("presets: not a tuple of zoo.family.Preset")
    else:
        problems += _check_aliases(family)
    if not (inspect.isclass(family.config) and issubclass(family.config, ArchitectureConfig)):
        problems.append(f"config: {family.config!r} is not a subclass of zoo.family.ArchitectureConfig")
        return problems
    problems += _check_config(family)
    return problems


def _is_target(target: Any) -> bool:
    module, colon, attribute = target.partition(":") if isinstance(target, str) else ("", "", "")
    return bool(module and colon and attribute)


def _check_formats(formats: Any) -> list[str]:
    if not isinstance(formats, tuple) or not all(isinstance(f, ForeignFormat) for f in formats):
        return [f"formats: {formats!r} is not a tuple of zoo.checkpoint.foreign.ForeignFormat"]
    problems = [
        f"formats: {fmt.name!r}.{piece} {getattr(fmt, piece)!r} is not a 'module:callable' string"
        for fmt in formats
        for piece in ("to_zoo", "from_zoo", "preprocessing")
        if not _is_target(getattr(fmt, piece)) and (piece != "preprocessing" or fmt.preprocessing is not None)
    ]
    names = [fmt.name for fmt in formats]
    if len(set(names)) != len(names):
        problems.append(f"formats: names {names} repeat one")
    return problems


def _check_aliases(family: Family) -> list[str]:
    """Each alias a name of its own (not one of the family's) for the family or one of its presets."""
    if not isinstance(family.aliases, Mapping):
        return [f"aliases: {family.aliases!r} is not a mapping of other libraries' names to zoo's"]
    own = {family.name, *(p.name for p in family.presets)}
    problems = []
    for alias, target in family.aliases.items():
        if not isinstance(alias, str) or not alias or alias in own:
            problems.append(
                f"aliases: {alias!r} is not another name (an empty or non-string key, or zoo's own)"
            )
        elif target not in own:
            problems.append(
                f"aliases: {alias!r} -> {target!r}, which is neither the family nor one of its presets "
                f"({', '.join(sorted(own))})"
            )
    return problems


def _check_config(family: Family) -> list[str]:
    """The config class against the rest of the declaration, at its defaults and every preset."""
    cls, problems = family.config, []
    fields = cls.model_fields
    if (
        get_args(fields["architecture"].annotation) != (family.name,)
        or get_origin(fields["architecture"].annotation) is not Literal
    ):
        problems.append(f"config: {cls.__name__}.architecture must be Literal[{family.name!r}]")
    missing = [key for key in cls.DATA_FIELDS if key not in fields]
    if missing:
        problems.append(f"config: DATA_FIELDS names fields {cls.__name__} does not have: {missing}")
    if "task" in fields:
        values = get_args(fields["task"].annotation)
        if isinstance(family.tasks, tuple) and set(values) != set(family.tasks):
            problems.append(
                f"config: {cls.__name__}.task takes {values}, but the family declares tasks {family.tasks}"
            )
    elif isinstance(family.tasks, tuple) and family.tasks != (cls.TASK,):
        problems.append(
            f"tasks: {family.tasks} needs a 'task' field on {cls.__name__} "
            f"(without one, its only task is {cls.__name__}.TASK = {cls.TASK!r})"
        )
    needs = {"classification": "num_classes", "language_modeling": "vocab_size"}
    for task in family.tasks if isinstance(family.tasks, tuple) else ():
        if needs.get(task) and needs[task] not in fields:
            problems.append(
                f"config: {cls.__name__} does {task} but has no {needs[task]!r} field (the head size)"
            )
    try:
        config = cls.model_validate({"architecture": family.name})
    except Exception as error:
        return [*problems, f"config: {cls.__name__} has no valid default config: {error}"]
    problems += _check_at(family, config, "the default config")
    for preset in family.presets if isinstance(family.presets, tuple) else ():
        try:
            config = cls.model_validate({**preset.fields, "preset": preset.name, "architecture": family.name})
        except Exception as error:
            problems.append(f"presets: {preset.name!r} is not a valid {cls.__name__}: {error}")
    return problems


def _check_at(family: Family, config: ArchitectureConfig, where: str) -> list[str]:
    problems = []
    try:
        shape = config.sample_shape()
        if not isinstance(shape, tuple) or not all(isinstance(s, int) and s > 0 for s in shape):
            problems.append(f"inputs: sample_shape() at {where} is {shape!r}, not a tuple of positive ints")
    except NotImplementedError:
        problems.append(f"inputs: {type(config).__name__} does not implement sample_shape()")
    if callable(family.weight_table):
        try:
            ports = family.weight_table(config)
        except Exception as error:
            problems.append(f"weight_table: fails at {where}: {type(error).__name__}: {error}")
        else:
            if not isinstance(ports, list) or not ports or not all(isinstance(p, Port) for p in ports):
                problems.append(
                    f"weight_table: at {where} returns {type(ports).__name__}, "
                    "not a list of zoo.checkpoint.tables.Port"
                )
    return problems


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
    """Every family and preset name, families first (what an unknown name's message lists)."""
    return [*families(), *presets()]


def aliases() -> dict[str, str]:
    """Other libraries' names -> the zoo family or preset of that shape, from every family (read
    from the cached families each time: a plugin installed meanwhile counts)."""
    found: dict[str, str] = {}
    taken = set(names())
    for family in families().values():
        for alias, target in family.aliases.items():
            if alias in found or alias in taken:
                raise ValueError(f"the alias {alias!r} ({family.name}) is registered twice or is a zoo name")
            found[alias] = target
    return found


def canonical_name(name: str) -> str:
    """The zoo family or preset ``name`` stands for: itself, the target of an alias
    (``vit_tiny_patch16_224`` -> ``vit-tiny``), or, for timm's ``model.tag`` names
    (``resnet50.tv_in1k``), that of the name before the tag. Anything else is refused with the
    names it is closest to."""
    for candidate in (name, name.partition(".")[0] if "." in name else None):
        if candidate in names():
            return candidate
        if candidate in aliases():
            return aliases()[candidate]
    close = difflib.get_close_matches(name, [*names(), *aliases()], n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(repr(c) for c in close)}?"
        if close
        else f"known: {', '.join(names())} (zoo list), and other libraries' names: {', '.join(aliases())}"
    )
    raise UnknownArchitectureError(
        f"{name!r} is neither a zoo architecture or preset nor another library's name of one; {hint}"
    )


def get_family(name: str) -> Family:
    """The family of a family name or a preset name."""
    if name in families():
        return families()[name]
    if name in presets():
        return presets()[name][0]
    if name in aliases():
        raise UnknownArchitectureError(
            f"{name!r} is another library's name of zoo's {aliases()[name]!r}; use {aliases()[name]!r}"
        )
    broken = unavailable()
    if name in broken:
        raise UnknownArchitectureError(f"the architecture family {name!r} is unavailable: {broken[name]}")
    skipped = f" ({', '.join(broken)} did not load: see the warning)" if broken else ""
    raise UnknownArchitectureError(
        f"{name!r} is not a registered architecture or preset; known: {', '.join(names())}{skipped}"
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
    """The validated config of a family or preset name with ``overrides`` on top."""
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
    variant: str = (
        ""  # what the config builds where the family builds several kinds (ArchitectureConfig.variant)
    )


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
    params = _parameters(family.weight_table, type(config), config.model_dump_json())
    return Entry(name, family.name, kind, family.tasks, params, description, variant=config.variant())


@functools.cache
def _parameters(table, config_type: type[ArchitectureConfig], config_json: str) -> int:
    """A config's parameter count, once per process: the weight table of a mixture of experts runs to
    hundreds of thousands of ports, and every listing (each test module that parametrises over the
    registry, `zoo list`) would make them again."""
    return count_parameters(table(config_type.model_validate_json(config_json)))
