"""The ``zoo`` command: a thin layer over the Python API.

One module per group of commands (:mod:`~zoo.cli.architecture_commands`,
:mod:`~zoo.cli.training`, :mod:`~zoo.cli.checkpoint_commands`,
:mod:`~zoo.cli.interchange_commands`, :mod:`~zoo.cli.run_commands`,
:mod:`~zoo.cli.compare_command`, :mod:`~zoo.cli.tokenizer_commands`), sharing
:mod:`~zoo.cli.errors` (exit status 2 for bad input, 1 for a failed run, one line on stderr,
never a traceback) and :mod:`~zoo.cli.output` (``--quiet``/``--json`` on every command).
TensorFlow's C++ log lines are kept off stderr (:mod:`zoo.native_logs`; set
``TF_CPP_MIN_LOG_LEVEL`` to see them). Commands import torch and TensorFlow only when they
run, so ``zoo list``, ``zoo show`` and ``zoo validate`` answer without either.
"""

from __future__ import annotations

import logging

import click

from zoo.cli.architecture_commands import list_, schema, show, validate
from zoo.cli.checkpoint_commands import evaluate, inspect, predict, sample
from zoo.cli.compare_command import compare
from zoo.cli.errors import EXIT_FAILED, EXIT_USAGE, user_errors
from zoo.cli.interchange_commands import export, import_, merge, quantize
from zoo.cli.output import script_output
from zoo.cli.run_commands import plot, runs
from zoo.cli.tokenizer_commands import tokenizer
from zoo.cli.training import finetune, resume, train
from zoo.native_logs import quiet_native_logs

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "main", "script_output", "user_errors"]

COMMANDS = (
    list_, show, validate, schema, train, finetune, resume, evaluate, sample, predict, compare, import_,
    export, merge, quantize, inspect, runs, plot, tokenizer,
)  # fmt: skip


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="zoo")
def main() -> None:
    """Train, fine-tune and compare architectures in PyTorch/Lightning and Keras 3."""
    quiet_native_logs()  # before any command imports TensorFlow: its C++ logging stays off stderr
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("zoo: %(message)s"))
    logger = logging.getLogger("zoo")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


for _command in COMMANDS:
    main.add_command(_command)
