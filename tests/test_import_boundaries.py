"""The layout's promise, read from the source: ``zoo/`` imports no family, and a family imports
only ``zoo`` and itself, so shared pieces (the recurrent net, its ports) live in ``zoo.nn``
instead of one family borrowing another's. Parsed, not imported: no framework is loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = sorted(p.name for p in (ROOT / "architectures").iterdir() if (p / "__init__.py").is_file())


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute imports; relative ones stay in their package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_zoo_imports_no_family():
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in imported(path) if m.split(".")[0] == "architectures")
        for path in (ROOT / "zoo").rglob("*.py")
    }
    assert {path: modules for path, modules in offenders.items() if modules} == {}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_only_zoo_and_itself(family):
    borrowed = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported(path) if m.split(".")[0] == "architectures" and m.split(".")[1:2] != [family]
        )
        for path in (ROOT / "architectures" / family).rglob("*.py")
    }
    assert {path: modules for path, modules in borrowed.items() if modules} == {}
