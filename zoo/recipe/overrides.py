"""``--set a.b=value``: overrides applied to a raw recipe before it is validated, and the
YAML reading both recipes and override values share."""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

import yaml

from zoo.limits import MAX_DEPTH, MAX_RECIPE_VALUES


class RefusedYAML(yaml.YAMLError):
    """YAML that zoo does not read as a recipe although YAML allows it (a key given twice, a
    key that is a list, an alias inside the value it names, a document past
    :mod:`zoo.limits`' bounds); the message is one line and names the line."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping: YAML itself keeps the
    last silently, so ``lr: 0.1`` further down a recipe would quietly win over the first.

    It also bounds the document as it is composed, before anything is built from it: nesting
    deeper than ``MAX_DEPTH`` (PyYAML recurses per level), more than ``MAX_RECIPE_VALUES``
    nodes with every alias counted as the nodes it stands for (ten lines of ten aliases of the
    line before stand for 10**10 values, which the recipe's checks and pydantic would each
    walk), and an alias inside the node it names (a cycle, which they would walk forever)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.values = 0  # nodes composed so far, aliases expanded
        self.sizes: dict[yaml.Node, int] = {}  # each finished node: the values it stands for

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            named = self.anchors.get(event.anchor)
            if named is not None and named not in self.sizes:
                raise RefusedYAML(
                    f"the alias *{event.anchor} (line {line}) is inside the value &{event.anchor} names, "
                    "so the value would contain itself; write it out without the alias"
                )
            node = super().compose_node(parent, index)  # an undefined alias is PyYAML's error
            self._count(self.sizes[node], line)
            return node
        collection = isinstance(
            event, yaml.SequenceStartEvent | yaml.MappingStartEvent
        )  # a level, as in JSON
        if collection and self.depth == MAX_DEPTH:
            raise RefusedYAML(
                f"nested more than {MAX_DEPTH} levels deep (line {line}); a recipe is a few levels deep"
            )
        before = self.values
        self.depth += collection
        node = super().compose_node(parent, index)
        self.depth -= collection
        self._count(1, line)
        self.sizes[node] = self.values - before
        return node

    def _count(self, values: int, line: int) -> None:
        self.values += values
        if self.values > MAX_RECIPE_VALUES:
            raise RefusedYAML(
                f"more than {MAX_RECIPE_VALUES:,} values by line {line} (each alias counted as the values "
                "it stands for); a recipe holds tens"
            )


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if not isinstance(key, Hashable):  # a list, a mapping or a !!set
            raise RefusedYAML(f"a {type(key).__name__} is used as a key (line {line}); keys are field names")
        if key in seen:
            raise RefusedYAML(
                f"the key {key!r} is given twice in one mapping (line {seen[key]} and line {line}); keep one"
            )
        seen[key] = line
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
