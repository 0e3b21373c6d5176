"""How a run stops early: a loss or weights that stop being numbers, a SIGTERM or Ctrl-C, a run folder
deleted under it, and what a stopped run leaves behind for ``zoo resume`` and ``zoo runs``."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from zoo.checkpoint.state import latest_state, step_of
from zoo.data.stream import unreadable_batch
from zoo.runs.folder import HELD_LOCKS, RunDir
from zoo.tracking import finish_mlflow

log = logging.getLogger("zoo")


class TrainingStopped(RuntimeError):
    """A run that stopped before its end. The command line says ``training stopped: ...`` and
    exits with ``exit_status``."""

    exit_status = 1


class NonFiniteLoss(TrainingStopped):
    """Training stopped because the loss stopped being a number."""

    def __init__(self, value: float, step: int, last_finite: tuple[int, float] | None):
        before = (
            f"the last finite loss was {last_finite[1]:.6g} at step {last_finite[0]}"
            if last_finite
            else "no step had a finite loss"
        )
        super().__init__(
            f"the training loss became {value} at step {step}; {before}. Lower optimizer.lr, "
            "add schedule.warmup_steps, or use trainer.precision '32-true'."
        )
        self.step = step


class NonFiniteWeights(NonFiniteLoss):
    """The weights stopped being numbers while the loss that led there was still finite: the
    state is not saved, so the last one kept is from before."""

    def __init__(self, step: int, names: list[str]):
        RuntimeError.__init__(
            self,
            f"the weights became NaN or infinite at step {step} ({', '.join(names[:3])}"
            f"{' ...' if len(names) > 3 else ''}) although its loss was finite. Lower optimizer.lr, "
            "add schedule.warmup_steps, or use trainer.precision '32-true'.",
        )
        self.step = step


class Terminated(TrainingStopped):
    """SIGTERM (a scheduler's preemption, ``kill``, a container stopping) ended the run where it
    could stop cleanly (zoo.runs.signals). The exit status is the one a process killed by SIGTERM
    reports, 128 + 15, so a job script or scheduler tells a preempted run from a finished one."""

    exit_status = 128 + signal.SIGTERM

    def __init__(self):
        super().__init__("the run received SIGTERM")


class Interrupted(Terminated):
    """Ctrl-C (SIGINT) ended the run where it could stop cleanly, as SIGTERM does
    (zoo.runs.signals). The exit status is the one a shell reports for a command Ctrl-C killed,
    128 + 2."""

    exit_status = 128 + signal.SIGINT

    def __init__(self):
        TrainingStopped.__init__(self, "the run received Ctrl-C (SIGINT)")


class RunFolderGone(TrainingStopped):
    """The run folder was deleted or moved away while the run trained: writing on would create
    a folder of stray files (no recipe.yaml, a metrics.csv without its header) that looks like a run."""

    def __init__(self, path: Path):
        super().__init__(
            f"the run folder {path} was deleted or moved away while the run trained; nothing more is "
            "written there. Train again (or move the folder back and zoo resume it)"
        )


def check_run_folder(path: Path) -> None:
    """Raise :class:`RunFolderGone` unless ``path`` is still the folder this process claimed: its
    ``.lock`` is the very file this process holds locked (``rm -rf`` and ``mv`` leave the open
    lock pointing at a file no longer there). Processes that hold no lock (the other ranks of a
    data-parallel run, a run without a folder) write nothing, and check nothing."""
    fd = HELD_LOCKS.get(str(Path(path).resolve()))
    if fd is None:
        return
    held = os.fstat(fd)
    try:
        now = os.stat(Path(path) / ".lock")
    except OSError:
        raise RunFolderGone(path) from None
    if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        raise RunFolderGone(path)


def record_stop(run: RunDir | None, error: BaseException) -> None:
    """What a run that stopped leaves behind, said once by the process that writes the files.

    A diverged run is marked in ``summary.json`` (status, step, the last finite state) and is
    not offered a resume: its states replay the same steps into the same divergence. A run
    stopped by a signal (SIGTERM, Ctrl-C) is marked ``interrupted``, with the state it resumes
    from. A run whose folder is gone writes nothing.
    """
    if run is None or isinstance(error, RunFolderGone):
        return
    last = latest_state(run.path)
    if isinstance(error, NonFiniteLoss):
        run.write_summary({
            "status": "diverged", "step": error.step, "error": str(error),
            "last_finite_state": str(last) if last else None,
        })  # fmt: skip
        kept = f"its last finite state is kept ({last})" if last else "no state was saved before"
        log.error(f"run {run.path} diverged at step {error.step}; {kept}")
        return
    kept = (
        f"its last training state is kept ({last.relative_to(run.path)}, step {step_of(last)}): "
        f"zoo resume {run.path}"
        if last
        else "no training state was saved yet: train again (export.state_every_n_steps saves states within "
        "an epoch too)"
    )
    if isinstance(error, Terminated | KeyboardInterrupt):
        terminated = isinstance(error, Terminated) and not isinstance(error, Interrupted)
        name, said = ("SIGTERM", "SIGTERM") if terminated else ("SIGINT", "Ctrl-C (SIGINT)")
        try:  # an MLflow run says KILLED; resume reopens it
            run.write_summary({
                "status": "interrupted", "signal": name,
                "last_state": str(last) if last else None, "step": step_of(last) if last else None,
            })  # fmt: skip
        except OSError as failure:  # a full disk: the state is what matters, and it is saved
            log.warning(f"{run.summary} could not be written ({failure.strerror})")
        log.error(f"the run stopped on {said}; {kept}")
        return
    finish_mlflow(run.path, {"status": "interrupted"})  # an MLflow run says KILLED; resume reopens it
    if last is not None:
        # a shard that changed under the run is named as such
        cause = "a batch its data could not give" if unreadable_batch(error) else type(error).__name__
        log.error(f"the run stopped ({cause}); {kept}")
