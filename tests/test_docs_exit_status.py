"""The exit statuses the docs promise are the ones the code uses, and every page that states one
agrees with docs/cli.md's table (docs/tracking.md once said every error exits 2)."""

from __future__ import annotations

import re
from pathlib import Path

from zoo.cli.errors import EXIT_FAILED, EXIT_USAGE
from zoo.runs import Interrupted, Terminated, TrainingStopped

ROOT = Path(__file__).parent.parent
PAGES = ["README.md", *(p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "docs").glob("*.md")))]


def table_statuses(page: str) -> set[int]:
    """The statuses in a page's exit-status table: rows that start with a number."""
    text = (ROOT / page).read_text()
    return {int(n) for n in re.findall(r"^\| (\d+) \|", text, re.M)}


def test_the_tables_are_the_codes_statuses():
    used = {0, EXIT_USAGE, EXIT_FAILED, TrainingStopped.exit_status, Terminated.exit_status}
    used |= {Interrupted.exit_status}
    assert table_statuses("docs/cli.md") == used == {0, 1, 2, 130, 143}
    assert table_statuses("docs/failure-modes.md") == used


def test_no_page_says_every_error_has_one_status():
    for page in PAGES:
        text = " ".join((ROOT / page).read_text().split())
        found = re.search(r"errors? (?:always|all) [^.]*exit (?:status|code) \d+", text, re.I)
        assert found is None, f"{page}: {found[0]!r}"


def test_statuses_named_in_prose_are_in_the_table():
    statuses = table_statuses("docs/cli.md")
    for page in PAGES:
        text = " ".join((ROOT / page).read_text().split())
        for number in re.findall(r"\bexit(?: status| code)?:? \**(\d+)\b", text, re.I):
            assert int(number) in statuses, f"{page}: exit {number} is not in docs/cli.md's table"
