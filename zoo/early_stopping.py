"""Early stopping and the best epoch: one rule, which both frameworks' callbacks follow.

Lightning's ``EarlyStopping`` and Keras' agree on the comparison (an epoch improves when its value
beats the best by more than ``min_delta``, in the monitored direction) and on patience (stop once
``patience`` epochs in a row did not improve), but not on everything around it: Keras resets its
counter and best at every ``fit`` call (zoo calls ``fit`` twice after a mid-epoch resume, and
once per span of ``trainer.max_steps``), neither saves its state in zoo's training states, and
Lightning's ``ModelCheckpoint`` calls an epoch best without ``min_delta`` where ``EarlyStopping``
applies it. zoo's rule, written once here:

- a finite value improves when there is no best yet, or when it is below ``best - min_delta``
  (``mode: min``) or above ``best + min_delta`` (``mode: max``); a non-finite value never does;
- an improving epoch becomes the best epoch (its weights are exported as ``model.best.safetensors``)
  and resets the wait; any other adds one to it, and the run stops at the end of the epoch where
  the wait reaches ``patience`` (never, where ``patience`` is None: the best epoch alone is kept).

The state (best value and epoch, wait, the stop) travels in both frameworks' training states, so
a resumed run decides as the uninterrupted one would.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from zoo.hardware import SetupError

STATE_KEY = "zoo_early_stopping"  # in a Lightning state; "early_stopping" in a Keras state's position
OUTCOME = ("best_epoch", "best_value", "last_epoch", "last_value", "stopped_epoch")
MAXIMISED = ("accuracy", "f1")  # metric names (or their parts) where higher is better


def monitor_mode(monitor: str, mode: str = "auto") -> str:
    """``min`` or ``max``: ``mode`` itself, or for ``auto`` the metric's own direction
    (accuracies and F1 up, losses, bits and perplexity down)."""
    if mode != "auto":
        return mode
    return "max" if any(word in monitor for word in MAXIMISED) else "min"


@dataclass
class EarlyStopping:
    """zoo's early-stopping decision (see the module's docstring), updated once per epoch end.
    Epochs are counted from 1, as ``metrics.csv`` counts them."""

    monitor: str
    mode: str  # "min" or "max"
    patience: int | None
    min_delta: float = 0.0
    best: float | None = None
    best_epoch: int | None = None
    wait: int = 0
    stopped_epoch: int | None = None
    last_epoch: int | None = None
    last_value: float | None = None

    @classmethod
    def from_recipe(cls, config) -> EarlyStopping | None:
        """The decision a recipe's ``trainer.early_stopping`` asks for, or None."""
        if config is None:
            return None
        mode = monitor_mode(config.monitor, config.mode)
        return cls(config.monitor, mode, config.patience, config.min_delta)

    def improves(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def update(self, epoch: int, value: float) -> bool:
        """Judge epoch ``epoch``'s monitored ``value``; True when it is the new best epoch.
        ``stopped_epoch`` is set once the run is to stop after this epoch."""
        self.last_epoch, self.last_value = epoch, float(value)
        if self.improves(value):
            self.best, self.best_epoch, self.wait = float(value), epoch, 0
            return True
        self.wait += 1
        if self.patience is not None and self.wait >= self.patience:
            self.stopped_epoch = epoch
        return False

    @property
    def stopped(self) -> bool:
        return self.stopped_epoch is not None

    def state(self) -> dict[str, Any]:
        """What a training state keeps of it (JSON and torch's weights-only loader both read it)."""
        return asdict(self)

    def restore(self, saved: dict[str, Any] | None) -> None:
        """Continue from a training state's :meth:`state` (None: a state written before zoo kept it,
        or by a run without early stopping: the decision starts afresh). The patience is the recipe's
        now: raised since the stop, the run goes on."""
        if not saved or saved.get("monitor") != self.monitor:
            return
        self.best, self.best_epoch = saved.get("best"), saved.get("best_epoch")
        self.wait = int(saved.get("wait", 0))
        # A recipe resumed with a higher patience (zoo resume --force) goes on waiting.
        waited = self.patience is not None and self.wait >= self.patience
        self.stopped_epoch = saved.get("stopped_epoch") if waited else None
        self.last_epoch, self.last_value = saved.get("last_epoch"), saved.get("last_value")

    def outcome(self) -> dict[str, float]:
        """What the run's metrics carry to summary.json (:data:`OUTCOME`): the best and the last
        epoch and their values, and the epoch the run stopped early at (absent where it ran on)."""
        values = (self.best_epoch, self.best, self.last_epoch, self.last_value, self.stopped_epoch)
        found = dict(zip(OUTCOME, values, strict=True))
        return {k: v for k, v in found.items() if v is not None}


def value_of(metrics: dict[str, Any], monitor: str) -> float:
    """The monitored value out of an epoch's metrics; a metric the run does not compute is named."""
    if monitor not in metrics:
        raise SetupError(
            f"trainer.early_stopping.monitor {monitor!r} is not among this run's epoch metrics "
            f"({', '.join(sorted(metrics))}); monitor one of them"
        )
    return float(metrics[monitor])


def check_validation(early: EarlyStopping | None, validation_samples: int) -> None:
    """A ``val_`` metric needs validation data: refused before the first step where there is none."""
    if early is not None and early.monitor.startswith("val_") and validation_samples == 0:
        raise SetupError(
            f"trainer.early_stopping.monitor is {early.monitor!r} but this run has no validation data "
            "(data.val_fraction is 0 or the source has no validation split); give validation data or "
            "monitor a train_ metric"
        )
