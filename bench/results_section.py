"""Rewrite one benchmark's section of bench/RESULTS.md, leaving every other section as it is."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(heading: str, text: str, path: Path = RESULTS) -> None:
    """Replace ``heading``'s table (up to the next ``## `` or ``### ``: subsections after it are
    other scripts') with ``text``, or append the section when the file has none yet."""
    lines = path.read_text().splitlines()
    body = [heading, "", *text.splitlines(), ""]
    if heading in lines:
        start = lines.index(heading)
        later = range(start + 1, len(lines))
        end = next((i for i in later if lines[i].startswith(("## ", "### "))), len(lines))
        lines[start:end] = body
    else:
        lines += ["", *body]
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def publish(heading: str, text: str, write: bool) -> int:
    """Print a benchmark's table and, asked to (``--write-results``), rewrite its section too:
    how a benchmark script ends. Returns the exit status, 0."""
    print(text)
    if write:
        write_section(heading, text)
    return 0
