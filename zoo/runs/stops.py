"""How a run stops early: a loss or weights that stop being numbers, and what a stopped run
leaves behind for ``zoo resume`` and ``zoo runs``."""

from __future__ import annotations

import logging

from zoo.runs.folder import RunDir

log = logging.getLogger("zoo")


class NonFiniteLoss(RuntimeError):
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


def record_stop(run: RunDir | None, error: BaseException) -> None:
    """What a run that stopped leaves behind, said once by the process that writes the files.

    A diverged run is marked in ``summary.json`` (status, step, the last finite state) and is
    not offered a resume: its states replay the same steps into the same divergence.
    """
    from zoo.state import latest_state

    if run is None:
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
    from zoo.tracking import finish_mlflow

    finish_mlflow(run.path, {"status": "interrupted"})  # an MLflow run says KILLED; resume reopens it
    if last is not None:
        log.error(f"the run stopped ({type(error).__name__}); its last state is kept: zoo resume {run.path}")
