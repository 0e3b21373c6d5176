"""Running zoo's command line in-process, and what its refusals look like.

Shared by the tests of refusals and failed runs: zoo answers input it will not take with exit 2
(1 for a run that failed) and one ``error:`` line naming the file, field or option, never a
traceback."""

from __future__ import annotations

import hashlib
from pathlib import Path

from click.testing import CliRunner
from conftest import RECIPE, tiny

from zoo.cli import main


def zoo(*args: str) -> tuple[int, str]:
    """``zoo ARGS`` in this process: (exit status, what it printed on stdout and stderr)."""
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


def zoo_cli(*args: object) -> tuple[int, str]:
    """Like :func:`zoo`, paths allowed, and failing the test at once on a traceback or on an
    exception that is not an exit."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    out = result.output  # stdout and stderr, as a terminal shows them
    assert "Traceback" not in out and (
        result.exception is None or isinstance(result.exception, SystemExit)
    ), f"{result.exception!r}\n{out}"
    return result.exit_code, out


def invoke(*args: object, env: dict[str, str] | None = None):
    """``zoo ARGS`` in this process, as click's Result (exit_code, output)."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def one_line_refusal(result, *words: str) -> str:
    """The command ended with exit 2 and one ``error:`` line holding ``words``, no traceback."""
    message = result.output.strip()
    assert result.exit_code == 2 and len(message.splitlines()) == 1, message
    for word in words:
        assert word in message, message
    return message


def sets(*overrides: str) -> list[str]:
    """``--set`` options for ``overrides``."""
    return [a for o in overrides for a in ("--set", o)]


def train(tmp_path, name: str, *overrides: str) -> tuple[int, str]:
    """``zoo train`` of the seconds-long recipe (conftest.tiny) as the run ``name`` under tmp_path."""
    return zoo("train", str(RECIPE), *sets(*tiny(tmp_path, f"export.run_name={name}", *overrides)))


def nested(levels: int, inner: str = "1") -> str:
    """JSON (and YAML flow) text nesting ``inner`` in ``levels`` arrays."""
    return "[" * levels + inner + "]" * levels


def digest(path: Path) -> str:
    """A file's SHA-256: a refusal left its bytes as they were."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
