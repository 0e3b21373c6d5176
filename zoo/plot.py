"""``zoo plot``: the loss and metric curves of several runs on one figure.

Read from each run's ``metrics.csv`` (one schema in both frameworks), so a Lightning run and a
Keras run of one recipe overlay epoch for epoch. One panel per quantity (loss, then each task
metric, then the learning rate); training solid, validation dashed; one colour per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zoo.hardware import SetupError
from zoo.runs import read_metrics

PANEL_ORDER = ("loss", "accuracy", "bpc")
MARKERS = ("o", "x", "s", "+", "^", "D")


class PlotError(SetupError):
    """A run that has nothing to draw, or a figure that cannot be written."""


@dataclass(frozen=True)
class Plotted:
    """What ``zoo plot`` wrote (its ``--json`` says so): the PNG and the quantities drawn."""

    path: Path
    panels: list[str]


def run_curves(run: Path) -> dict[str, list[float | None]]:
    """A run's columns as numbers (None where an epoch has no value), or a clear error."""
    path = run / "metrics.csv"
    if not path.is_file():
        raise PlotError(
            f"{run} has no metrics.csv: the run stopped before its first epoch ended, or it is not a "
            "run folder (zoo runs lists them)"
        )
    try:
        rows = read_metrics(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise PlotError(f"{path} does not read: {error}") from None
    if not rows or "epoch" not in rows[0]:
        raise PlotError(f"{path} has no epoch rows yet: nothing to plot")
    curves: dict[str, list[float | None]] = {}
    for column in rows[0]:
        values = [_number(r.get(column)) for r in rows]
        if any(v is not None for v in values):
            curves[column] = values
    return curves


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def panels(all_curves: list[dict[str, list[float | None]]]) -> list[str]:
    """The quantities drawn: every ``train_X``/``val_X`` any run has, loss first, then lr."""
    names = {c.split("_", 1)[1] for curves in all_curves for c in curves if c.startswith(("train_", "val_"))}
    ordered = [n for n in PANEL_ORDER if n in names] + sorted(names - set(PANEL_ORDER))
    if any("lr" in curves for curves in all_curves):
        ordered.append("lr")
    return ordered


def label(run: Path) -> str:
    """A run's legend entry: its folder name, and its framework where the name lacks it."""
    from zoo.runs import read_run

    framework = read_run(run).framework
    return run.name if not framework or framework in run.name else f"{run.name} ({framework})"


def plot_runs(runs: list[Path], out: Path, title: str | None = None) -> Plotted:
    """Write the PNG. Every run must have at least one epoch of metrics."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file, on any machine
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if not runs:
        raise PlotError("give at least one run folder to plot")
    all_curves = [run_curves(run) for run in runs]
    names = panels(all_curves)
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = [label(run) for run in runs]
    for index, (run_label, curves) in enumerate(zip(labels, all_curves, strict=True)):
        colour = colours[index % len(colours)]
        # Twins of one recipe draw the same curve: a marker of its own keeps each run visible.
        marker = MARKERS[index % len(MARKERS)]
        epochs = curves.get("epoch") or [float(i + 1) for i in range(len(next(iter(curves.values()))))]
        for axis, name in zip(axes[0], names, strict=True):
            series = [("lr", "-", "")] if name == "lr" else [(f"train_{name}", "-", " train"),
                                                              (f"val_{name}", "--", " val")]  # fmt: skip
            for column, style, suffix in series:
                values = curves.get(column)
                if values is None:
                    continue
                pairs = zip(epochs, values, strict=True)
                points = [(e, v) for e, v in pairs if e is not None and v is not None]
                if points:
                    axis.plot(*zip(*points, strict=True), style, color=colour, marker=marker, markersize=5,
                              fillstyle="none",
                              label=f"{run_label}{suffix}")  # fmt: skip
    for axis, name in zip(axes[0], names, strict=True):
        axis.set_title("learning rate" if name == "lr" else name)
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=110)
    except OSError as error:
        raise PlotError(f"cannot write {out}: {error.strerror or error}") from None
    finally:
        plt.close(figure)
    return Plotted(out, names)
