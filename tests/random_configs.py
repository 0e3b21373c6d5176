"""Configs drawn from a family's own pydantic config class, for the random-config parity test.

Nothing here names a family: integer, float, literal and boolean fields (and nested pydantic
sections of them) become Hypothesis strategies from their types and bounds (small values, so a
drawn model runs in milliseconds), and :func:`edge_cases` adds sizes 1 and 7 for every task a
family supports. A new family is drawn from as soon as it is registered.
"""

from __future__ import annotations

import functools
import math
import os
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types as at
from hypothesis import assume
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from zoo import registry
from zoo.checkpoint.tables import tensor_specs
from zoo.family import ArchitectureConfig, Family

# Random configs per family (each checked in both directions), besides the explicit edge
# cases; ZOO_PARITY_EXAMPLES=200 makes a thorough run.
EXAMPLES = int(os.environ.get("ZOO_PARITY_EXAMPLES", "10"))
SMALL = 8  # integer fields are drawn from [lower bound, lower bound + SMALL - 1] ...
REPEATS = 3  # ... and fields that repeat layers from [lower bound, lower bound + REPEATS - 1]
MAX_BATCH = 7
MAX_STEPS = 8
SMALL_IMAGE = 16
LARGE = 64  # the largest integer drawn: a default above the drawn range, capped
NOT_DRAWN = ("architecture", "preset")

FAMILIES = list(registry.families())


@dataclass(frozen=True)
class Case:
    """One drawn example: the config fields that differ from the defaults, and the input."""

    fields: dict[str, Any]
    batch: int
    steps: int | None  # sequence length; None where the config fixes the sample shape
    seed: int


# ----------------------------------------------------------------- configs from types


def _bounds(metadata: list[Any]) -> tuple[float | None, float | None, bool, bool]:
    """(low, high, low exclusive, high exclusive) from annotated_types constraints."""
    low = high = None
    low_open = high_open = False
    for item in metadata:
        if isinstance(item, at.Ge):
            low, low_open = item.ge, False
        elif isinstance(item, at.Gt):
            low, low_open = item.gt, True
        elif isinstance(item, at.Le):
            high, high_open = item.le, False
        elif isinstance(item, at.Lt):
            high, high_open = item.lt, True
    return low, high, low_open, high_open


def _int_range(metadata: list[Any]) -> tuple[int, int | None]:
    low, high, low_open, high_open = _bounds(metadata)
    lo = 0 if low is None else math.floor(low) + 1 if low_open else math.ceil(low)
    hi = None if high is None else math.ceil(high) - 1 if high_open else math.floor(high)
    return lo, hi


def _integers(lo: int, hi: int, pool: tuple[int, ...]) -> st.SearchStrategy:
    """Integers in [lo, hi], often one of the example's ``pool`` of shared sizes: shape bugs
    hide where two sizes coincide (one feature per head and as many steps as heads)."""
    shared = sorted({v for v in pool if lo <= v <= hi})
    own = st.integers(lo, hi)
    return st.one_of(st.sampled_from(shared), own) if shared else own


def _strategy(
    name: str,
    annotation: Any,
    metadata: list[Any],
    default: Any,
    small: int = SMALL,
    pool: tuple[int, ...] = (),
    repeat: bool = False,
) -> st.SearchStrategy:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _strategy(name, inner, [*metadata, *extra], default, small, pool, repeat)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(
            *(
                st.none()
                if arg is type(None)
                else _strategy(name, arg, metadata, default, small, pool, repeat)
                for arg in typing.get_args(annotation)
            )
        )
    if origin is Literal:
        return st.sampled_from(typing.get_args(annotation))
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        lo, hi = _int_range(metadata)
        top = lo + small - 1 if hi is None else min(hi, lo + small - 1)
        drawn = _integers(lo, top, pool)
        # A larger default (a max_len, a width) is what some combinations need to validate,
        # offered at most at LARGE: 64 validates what a published size does, and the published
        # sizes together cost minutes (Gemma's 262,144-token vocabulary at its width of 640 is
        # 168M parameters, a minute of float64 copies in one example). An ImageNet-sized image
        # (224) is capped the same way: 16x16 validates what 224 does, at 1/196 the cost.
        # A layer count never needs its default (SmolLM's 30 layers, BERT's 12: whole minutes of
        # Keras builds, and in float32 a chaos that hides differences).
        if name == "image_size" and isinstance(default, int):
            default = min(default, SMALL_IMAGE)
        if isinstance(default, int) and default > top and not repeat:
            return st.one_of(drawn, st.just(min(default, LARGE)))
        return drawn
    if annotation is float:
        if "dropout" in name:  # train-mode outputs are only comparable without dropout
            return st.just(0.0)
        low, high, low_open, high_open = _bounds(metadata)
        lo = max(0.0 if low is None else float(low), 1e-5)  # a float32 epsilon must not round to 0
        hi = lo + 1.0 if high is None else min(float(high), lo + 1.0)
        return st.floats(lo, hi, exclude_min=low_open and lo == low, exclude_max=high_open and hi == high)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a nested section
        return st.fixed_dictionaries(
            {
                key: _strategy(key, info.annotation, list(info.metadata), info.default, small, pool)
                for key, info in annotation.model_fields.items()
            }
        )
    if origin is list:
        (item,) = typing.get_args(annotation)
        # a list that is empty by default (Qwen3-MoE's mlp_only_layers) is drawn empty too
        shortest = max(
            [0 if default == [] else 1, *(n.min_length for n in metadata if isinstance(n, at.MinLen))]
        )
        longest = min([shortest + 2, *(n.max_length for n in metadata if isinstance(n, at.MaxLen))])
        items = _strategy(name, item, [], None, small, pool, repeat)
        return st.lists(items, min_size=shortest, max_size=longest)
    raise TypeError(
        f"config field {name!r} has type {annotation!r}, which this test cannot draw; "
        "teach _strategy() the type"
    )


def _drawable(config_class: type[ArchitectureConfig]) -> dict[str, FieldInfo]:
    return {k: v for k, v in config_class.model_fields.items() if k not in NOT_DRAWN}


def repeat_fields(family: Family) -> frozenset[str]:
    return _repeat_fields(family.name)


@functools.cache
def _repeat_fields(name: str) -> frozenset[str]:
    """Integer fields (and lists of integers) that change how many tensors the model has (a
    layer count, blocks per stage), not their shapes. Building a Keras layer costs far more
    than widening one, and a third layer finds little that a second does not, so these stay
    small."""
    family = registry.families()[name]
    default = family.config.model_validate({"architecture": family.name})
    tensors = len(tensor_specs(family.weight_table(default)))
    found = set()
    for key, info in _drawable(family.config).items():
        value = getattr(default, key)
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            others = [[v + step, *value[1:]] for v in value[:1] for step in (1, 2, -1)]  # blocks per stage
        elif info.annotation is int:
            others = [value + 1, value + 2, value - 1]
        else:
            continue
        for other in others:
            config = _validate(family, {**_changed(default), key: other})
            if config is not None:
                if len(tensor_specs(family.weight_table(config))) != tensors:
                    found.add(key)
                break
    return frozenset(found)


def _validate(family: Family, fields: dict[str, Any]) -> ArchitectureConfig | None:
    try:
        return family.config.model_validate({**fields, "architecture": family.name})
    except ValidationError:
        return None


def _changed(config: ArchitectureConfig) -> dict[str, Any]:
    """The fields of ``config`` that differ from the defaults (what a failure report shows)."""
    return {
        k: getattr(config, k)
        for k, info in _drawable(type(config)).items()
        if getattr(config, k) != info.get_default(call_default_factory=True)
    }


def _longest_steps(config: ArchitectureConfig) -> int:
    """At most the context the config declares (GPT-2's n_positions, BERT's max_len...)."""
    return min(MAX_STEPS, config.context_length() or MAX_STEPS)


@st.composite
def cases(draw, family: Family) -> Case:
    pool = tuple(draw(st.lists(st.integers(1, SMALL), min_size=1, max_size=2)))
    repeats = repeat_fields(family)
    fields = {}
    for k, info in _drawable(family.config).items():
        small = REPEATS if k in repeats else SMALL
        fields[k] = draw(
            _strategy(k, info.annotation, list(info.metadata), info.default, small, pool, k in repeats)
        )
    config = _validate(family, fields)
    assume(config is not None)
    batch = draw(_integers(1, MAX_BATCH, pool))
    steps = None if family.input_kind == "image" else draw(_integers(1, _longest_steps(config), pool))
    return Case(_changed(config), batch, steps, draw(st.integers(0, 2**31 - 1)))


# ------------------------------------------------------------------- explicit examples


def _dropout_off(family: Family) -> dict[str, float]:
    return {k: 0.0 for k in _drawable(family.config) if "dropout" in k}


def _sized(family: Family, size: int, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with every integer field (and integer list) at ``size`` (a layer count at
    most 2), clamped into its bounds. Where that does not validate, a layer count one larger
    (Qwen3-MoE's dense layer 1 wants two: at its default of 30, an edge case took 8 s), else
    the first field whose default makes it valid keeps its default; failing that, fields are
    set to ``size`` one by one wherever the config still validates."""
    sizable = {}
    for name, info in _drawable(family.config).items():
        value = _sized_value(
            info.annotation, list(info.metadata), min(size, 2) if name in repeat_fields(family) else size
        )
        if name not in base and value is not None:
            sizable[name] = value
    fields = {**base, **sizable}
    if _validate(family, fields) is not None:
        return fields
    for name in [k for k in sizable if k in repeat_fields(family) and isinstance(sizable[k], int)]:
        more = {**fields, name: sizable[name] + 1}  # one more layer (where a layer index is 1)
        if _validate(family, more) is not None:
            return more
    for name in sizable:
        fewer = {k: v for k, v in fields.items() if k != name}
        if _validate(family, fewer) is not None:
            return fewer
    fields = dict(base)
    for name, value in sizable.items():
        if _validate(family, {**fields, name: value}) is not None:
            fields[name] = value
    return fields


def _sized_value(annotation: Any, metadata: list[Any], size: int) -> Any:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _sized_value(inner, [*metadata, *extra], size)
    if origin in (typing.Union, types.UnionType):
        values = (_sized_value(a, metadata, size) for a in typing.get_args(annotation))
        return next((v for v in values if v is not None), None)
    if annotation is int:
        lo, hi = _int_range(metadata)
        return max(lo, size) if hi is None else min(hi, max(lo, size))
    if origin is list:  # as many items as the list must have (a ResNet's or ConvNeXt's four stages)
        item = _sized_value(typing.get_args(annotation)[0], [], size)
        shortest = max([1, *(n.min_length for n in metadata if isinstance(n, at.MinLen))])
        return None if item is None else [item] * shortest
    return None


def _task_variants(family: Family) -> list[dict[str, Any]]:
    """One dict per value of each Literal field the data decides (a task), else one empty dict."""
    variants: list[dict[str, Any]] = [{}]
    for name in family.config.DATA_FIELDS:
        annotation = family.config.model_fields[name].annotation
        if typing.get_origin(annotation) is Literal:
            variants = [{**v, name: value} for v in variants for value in typing.get_args(annotation)]
    return variants


def edge_cases(family: Family) -> list[Case]:
    """For every task: sizes 1 and 7 everywhere (fields, batch, sequence length); and, for
    configs with a model width and a head count, one feature per head with as many steps as
    heads, unless size 7 already gives exactly that."""
    found = []
    heads = {"d_model", "num_heads"} <= set(family.config.model_fields) and family.input_kind != "image"
    for task in _task_variants(family):
        base = {**_dropout_off(family), **task}
        covered = False
        for size in (1, 7):
            config = _validate(family, _sized(family, size, base))
            if config is None:
                continue
            steps = None if family.input_kind == "image" else min(size, _longest_steps(config))
            found.append(Case(_changed(config), size, steps, size))
            covered |= heads and config.d_model == config.num_heads == steps
        if heads and not covered:
            config = _validate(family, {**base, "d_model": 4, "num_heads": 4})
            if config is not None:
                found.append(Case(_changed(config), 3, min(4, _longest_steps(config)), 4))
    return found
