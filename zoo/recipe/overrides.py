"""``--set a.b=value``: overrides applied to a raw recipe before it is validated, and the
YAML reading both recipes and override values share."""

from __future__ import annotations

import re
from typing import Any

import yaml


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping: YAML itself keeps the
    last silently, so ``lr: 0.1`` further down a recipe would quietly win over the first."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, dict | list):
            raise yaml.constructor.ConstructorError(
                None, None, f"a {type(key).__name__} is used as a key (line {key_node.start_mark.line + 1}); "
                "keys are field names", key_node.start_mark,
            )  # fmt: skip
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is given twice in one mapping (line {seen[key]} and "
                f"line {key_node.start_mark.line + 1}); keep one", key_node.start_mark,
            )  # fmt: skip
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
# YAML 1.1 (PyYAML) reads ``1e-3`` and ``1e6`` as text: only ``1.0e-3`` is a float there. A
# recipe means the number, as YAML 1.2 and JSON do (and numbers are strict, so the text would
# be refused, not converted).
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: builds plain data only


def apply_override(raw: dict[str, Any], item: str) -> None:
    """``trainer.precision=bf16-mixed``: the value is parsed as YAML (numbers, lists, null)."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ValueError(f"override {item!r} is not of the form section.field=value")
    try:
        value = read_yaml(text) if text else ""
    except yaml.YAMLError as error:
        problem = str(error).splitlines()[0]
        raise ValueError(f"override {item!r}: the value is not valid YAML ({problem}); quote it") from None
    parts = key.split(".")
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        if isinstance(node, list) and part.isdigit():
            if int(part) >= len(node):
                where = ".".join(parts[:depth])
                raise ValueError(f"override {item!r}: {where} has {len(node)} items, no index {part}")
            node = node[int(part)]
            continue
        if not isinstance(node, dict):
            raise ValueError(f"override {item!r}: {part!r} is not inside a section")
        node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list) and last.isdigit():
        if int(last) >= len(node):
            where = ".".join(parts[:-1])
            raise ValueError(f"override {item!r}: {where} has {len(node)} items, no index {last}")
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ValueError(f"override {item!r}: cannot set {last!r} there")
