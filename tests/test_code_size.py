"""The house's reading budget (docs/layout.md): no module in ``zoo/`` or ``architectures/`` over
400 lines and no function over 60, counted from ``def`` to its last line. Past those sizes a
module holds two jobs and a function several steps, and each next family or feature pays for it
in reading time. Parsed, not imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE_LINES = 400
FUNCTION_LINES = 60
SOURCES = sorted([*(ROOT / "zoo").rglob("*.py"), *(ROOT / "architectures").rglob("*.py")])


def oversized(paths: list[Path], module_lines: int, function_lines: int) -> list[str]:
    found = []
    for path in paths:
        text = path.read_text()
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if (lines := len(text.splitlines())) > module_lines:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > function_lines:
                    found.append(f"{name}:{node.lineno}: {node.name} is {length} lines")
    return found


def test_no_module_or_function_is_over_its_budget():
    found = oversized(SOURCES, MODULE_LINES, FUNCTION_LINES)
    budget = f"over {MODULE_LINES} lines a module or {FUNCTION_LINES} a function; split by job"
    assert not found, budget + ":\n" + "\n".join(found)


def test_the_budget_reader_counts_functions_and_modules(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * 5 + "\n" * 3)
    assert oversized([source], 12, 5) == [f"{source}: 13 lines", f"{source}:5: long is 6 lines"]
