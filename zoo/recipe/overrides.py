"""``--set a.b=value``: overrides applied to a raw recipe before it is validated."""

from __future__ import annotations

from typing import Any

import yaml


def apply_override(raw: dict[str, Any], item: str) -> None:
    """``trainer.precision=bf16-mixed``: the value is parsed as YAML (numbers, lists, null)."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ValueError(f"override {item!r} is not of the form section.field=value")
    value = yaml.safe_load(text) if text else ""
    parts = key.split(".")
    node: Any = raw
    for part in parts[:-1]:
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)]
            continue
        if not isinstance(node, dict):
            raise ValueError(f"override {item!r}: {part!r} is not inside a section")
        node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ValueError(f"override {item!r}: cannot set {last!r} there")
