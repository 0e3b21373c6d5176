"""How a command ends when it cannot do its work: one line on stderr, never a traceback.

Exit status 2 means the input was wrong (a recipe, a path, a checkpoint, a prompt) and the
message says what would work; 1 means a run that started and failed (a loss or weights that
stopped being numbers, a run folder deleted under it, a compare that differs); 143 (128 +
SIGTERM) and 130 (128 + SIGINT, Ctrl-C) a run that the signal stopped after saving its state
(zoo.runs.signals). ``--json`` does
not change this: stdout stays empty and the message goes to stderr, so a script checks the
status first and parses stdout only when it is 0.
"""

from __future__ import annotations

import errno
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from zoo import registry
from zoo.checkpoint.file import CheckpointError, NonFiniteTensors
from zoo.data import DataError
from zoo.hardware import SetupError
from zoo.limits import special_file_problem
from zoo.nn.errors import input_error
from zoo.recipe import RecipeError
from zoo.runs import TrainingStopped
from zoo.sampling import PromptError

EXIT_USAGE = 2
EXIT_FAILED = 1

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Errors a user can fix end with a message and exit code 2; a run that stops, with 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        fixable = (
            SetupError, RecipeError, DataError, CheckpointError, registry.UnknownArchitectureError,
            PromptError,
        )  # fmt: skip
        refuse_special_files([*args, *kwargs.values()])
        try:
            return fn(*args, **kwargs)
        except fixable as error:
            fail(f"error: {error}", EXIT_USAGE)
        except TrainingStopped as error:  # diverged (1), its folder deleted (1), SIGTERM (143), Ctrl-C (130)
            fail(f"training stopped: {error}", error.exit_status)
        except NonFiniteTensors as error:  # a diverged model: a failed run, not a typo
            fail(f"error: {error}", EXIT_FAILED)
        except OSError as error:  # a path that cannot be written or read, a full disk
            fail(*os_error(error))
        except Exception as error:
            found = input_error(error)  # a graph assertion carrying a zoo input check's message
            if found is None:
                raise
            fail(f"error: {found}", EXIT_USAGE)

    return wrapper  # type: ignore[return-value]


def refuse_special_files(values: list[Any]) -> None:
    """Every path a command was given (an argument or option of click's ``Path`` type, alone or
    repeated) that is a FIFO, a device or a socket ends the command before it opens anything:
    here, once for all commands, rather than in each reader. Inputs named in other ways (a
    predict glob, a recipe's data files, a folder's contents) meet the same check,
    :func:`zoo.limits.require_regular_file`, where they are opened."""
    for value in values:
        for path in value if isinstance(value, tuple | list) else (value,):
            problem = special_file_problem(path) if isinstance(path, Path) else None
            if problem is not None:
                fail(f"error: {problem}", EXIT_USAGE)


# What would work, by errno; a full disk or a failing device is the machine's, not the input's.
_REMEDIES = {
    errno.ENAMETOOLONG: ("use a shorter name (at most 255 bytes for each folder or file name)", EXIT_USAGE),
    errno.EACCES: ("choose a folder you can write to, or change its permissions", EXIT_USAGE),
    errno.EPERM: ("choose a folder you can write to, or change its permissions", EXIT_USAGE),
    errno.EROFS: ("the file system is read-only: choose a folder on a writable one", EXIT_USAGE),
    errno.ENOSPC: ("free some space and run again; files written before are kept", EXIT_FAILED),
    errno.EDQUOT: ("the disk quota is used up: free some space; files written before are kept", EXIT_FAILED),
    errno.EIO: ("the device reported an I/O error; files written before are kept", EXIT_FAILED),
}

_WRITES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def os_error(error: OSError) -> tuple[str, int]:
    """One line for an ``OSError``: the path, the system's words and what would work."""
    # A copy or move that fails to write (Lightning's state goes through a temporary file in
    # /tmp) names its source first: the file the user cares about is the destination.
    path = error.filename2 if error.filename2 and error.errno in _WRITES else error.filename
    where = f"{path}: " if path else ""
    words = error.strerror or str(error)
    remedy, status = _REMEDIES.get(error.errno, ("", EXIT_USAGE))
    return f"error: {where}{words}" + (f"; {remedy}" if remedy else ""), status


def fail(message: str, status: int) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(status)
