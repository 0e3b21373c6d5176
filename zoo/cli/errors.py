"""How a command ends when it cannot do its work: one line on stderr, never a traceback.

Exit status 2 means the input was wrong (a recipe, a path, a checkpoint, a prompt) and the
message says what would work; 1 means a run that started and failed (a loss or weights that
stopped being numbers, a compare that differs). ``--json`` does not change this: stdout stays
empty and the message goes to stderr, so a script checks the status first and parses stdout
only when it is 0.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

EXIT_USAGE = 2
EXIT_FAILED = 1

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Errors a user can fix end with a message and exit code 2; a run that stops, with 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from zoo import registry
        from zoo.checkpoint import CheckpointError, NonFiniteTensors
        from zoo.data import DataError
        from zoo.hardware import SetupError
        from zoo.recipe import RecipeError
        from zoo.runs import NonFiniteLoss
        from zoo.sample import PromptError

        fixable = (
            SetupError, RecipeError, DataError, CheckpointError, registry.UnknownArchitectureError,
            FileNotFoundError, PromptError,
        )  # fmt: skip
        try:
            return fn(*args, **kwargs)
        except fixable as error:
            fail(f"error: {error}", EXIT_USAGE)
        except NonFiniteLoss as error:
            fail(f"training stopped: {error}", EXIT_FAILED)
        except NonFiniteTensors as error:  # a diverged model: a failed run, not a typo
            fail(f"error: {error}", EXIT_FAILED)
        except Exception as error:
            from zoo.nn.errors import input_error

            found = input_error(error)  # a graph assertion carrying a zoo input check's message
            if found is None:
                raise
            fail(f"error: {found}", EXIT_USAGE)

    return wrapper  # type: ignore[return-value]


def fail(message: str, status: int) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(status)
