"""What every command shares about its output: the ``--quiet``/``--json`` options, keeping
stdout for the answer while the work runs, and the table and JSON printers.

The promise to scripts: with ``--json`` stdout holds exactly one JSON document (what the
command found or wrote), with ``--quiet`` only the essential line (a path, a verdict) or
nothing; progress bars, library prints and zoo's messages go elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from zoo.progress import silenced

FRAMEWORKS = ("lightning", "torch", "keras")

overrides_option = click.option(
    "--set", "overrides", multiple=True, metavar="a.b=VALUE",
    help="Override a recipe field (value parsed as YAML); repeatable.",
)  # fmt: skip
framework_option = click.option(
    "--framework", type=click.Choice(FRAMEWORKS), default=None,
    help="Framework to run in (default: the recipe's trainer.framework).",
)  # fmt: skip
quiet_option = click.option(
    "-q", "--quiet", is_flag=True,
    help="No progress bars or messages: only the essential line (errors still on stderr).",
)  # fmt: skip
json_option = click.option(
    "--json", "as_json", is_flag=True,
    help="Print one JSON document on stdout and nothing else there (progress goes to stderr).",
)  # fmt: skip
dir_option = click.option(
    "--dir", "root", type=click.Path(file_okay=False, path_type=Path), default=Path("checkpoints"),
    show_default=True, help="The export directory the runs are in (a recipe's export.dir).",
)  # fmt: skip


def for_scripts(fn):
    """``--json`` and ``--quiet`` on a command (every zoo command has both)."""
    return json_option(quiet_option(fn))


@contextlib.contextmanager
def script_output(quiet: bool, as_json: bool) -> Iterator[None]:
    """Keep stdout for the result while a command works.

    With ``--json`` whatever else would reach stdout (Lightning's and Keras' progress bars, a
    library's prints, C++ logging) goes to stderr, at the file-descriptor level too, so a
    script can parse stdout; with ``--quiet`` it is dropped, and zoo's messages below warnings.
    Either way zoo's own progress bars (:mod:`zoo.progress`) are off.
    """
    if not (quiet or as_json):
        yield
        return
    logger = logging.getLogger("zoo")
    level = logger.level
    if quiet:
        logger.setLevel(logging.WARNING)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # read when TensorFlow loads
    sink = open(os.devnull, "w") if quiet else sys.stderr  # noqa: SIM115 (closed below)
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(sink.fileno() if quiet else 2, 1)
    try:
        with silenced(), contextlib.redirect_stdout(sink):
            yield
    finally:
        sink.flush()
        os.dup2(saved, 1)
        os.close(saved)
        logger.setLevel(level)
        if quiet:
            sink.close()


def emit_json(document: Any) -> None:
    """The one JSON document of ``--json`` (paths and other objects as strings)."""
    click.echo(json.dumps(document, indent=2, default=str))


def table(rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned columns, the first row the header."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        click.echo("  ".join(cells).rstrip())


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{rest:02d}s" if minutes else f"{seconds:.1f}s"


def type_name(annotation: Any) -> str:
    """A config field's annotation as people write it (``int | None``, ``a|b`` for literals)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))
