"""Run folders: where a training run writes its recipe, metrics, checkpoint and summary.

The pieces live by what they are for: :mod:`zoo.runs.launch` (which process writes, launcher
variables), :mod:`zoo.runs.folder` (creating, locking, resuming a folder),
:mod:`zoo.runs.stops` (a run that stops early),
:mod:`zoo.runs.signals` (SIGTERM, Ctrl-C), :mod:`zoo.runs.growth` (a loss that grew instead of falling)
and :mod:`zoo.runs.listing` (finding runs again for ``zoo runs``). Their public names are all here;
``metrics.csv`` itself is :mod:`zoo.metrics_file`'s, below the data package that names its metrics.
"""

from __future__ import annotations

from zoo.runs.folder import RECORDED_RECIPE, RunDir, prepare_resume
from zoo.runs.launch import LAUNCH_VARIABLES, RANK_VARIABLES, check_launch, is_primary_process
from zoo.runs.listing import (
    BEST,
    RUN_FILES,
    STATUSES,
    RunInfo,
    best_metric,
    find_runs,
    is_run_folder,
    next_commands,
    read_run,
    resolve_run,
)
from zoo.runs.stops import (
    Interrupted,
    NonFiniteLoss,
    NonFiniteWeights,
    RunFolderGone,
    Terminated,
    TrainingStopped,
    check_run_folder,
    record_stop,
)

__all__ = [
    "BEST", "LAUNCH_VARIABLES", "RANK_VARIABLES", "RECORDED_RECIPE", "RUN_FILES", "STATUSES",
    "Interrupted", "NonFiniteLoss", "NonFiniteWeights", "RunDir", "RunFolderGone", "RunInfo",
    "Terminated", "TrainingStopped", "best_metric", "check_launch", "check_run_folder", "find_runs",
    "is_primary_process", "is_run_folder", "next_commands", "prepare_resume", "read_run",
    "record_stop", "resolve_run",
]  # fmt: skip
