"""``zoo plot``: the loss and metric curves of several runs on one figure.

Read from each run's ``metrics.csv`` (one schema in both frameworks), so a Lightning run and a
Keras run of one recipe overlay epoch for epoch. One panel per quantity (loss, then each task
metric, then the learning rate where it changes); training solid, validation dashed; one colour
and marker per run, named once in one legend for the whole figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zoo.hardware import SetupError
from zoo.metrics_file import read_metrics
from zoo.runs import read_run

PANEL_ORDER = ("loss", "accuracy", "bpc", "bpt")
LOSS_PANELS = ("loss", "bpc", "bpt")  # the panels --log-loss draws on a log scale (bits: loss / ln 2)
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
    if any(_changes(curves.get("lr")) for curves in all_curves):  # a constant rate is a flat line
        ordered.append("lr")
    return ordered


def _changes(values: list[float | None] | None) -> bool:
    found = {v for v in values or [] if v is not None}
    return len(found) > 1


def label(run: Path) -> str:
    """A run's legend entry: its folder name, and its framework where the name lacks it."""
    framework = read_run(run).framework
    return run.name if not framework or framework in run.name else f"{run.name} ({framework})"


def plot_runs(
    runs: list[Path],
    out: Path,
    title: str | None = None,
    labels: list[str] | None = None,
    log_loss: bool = False,
) -> Plotted:
    """Write the PNG. Every run must have at least one epoch of metrics; ``labels`` (one per run)
    replace the run folders' names in the legend."""
    import matplotlib.pyplot as plt

    figure, names = draw(runs, title, labels, log_loss)
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=110, bbox_inches="tight")  # the legend below the panels included
    except OSError as error:
        raise PlotError(f"cannot write {out}: {error.strerror or error}") from None
    finally:
        plt.close(figure)
    return Plotted(out, names)


def draw(runs: list[Path], title: str | None, labels: list[str] | None, log_loss: bool):
    """The figure and its panels' names."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file, on any machine
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    if not runs:
        raise PlotError("give at least one run folder to plot")
    if labels and len(labels) != len(runs):
        raise PlotError(f"--label: {len(labels)} labels for {len(runs)} runs; give one per run, in order")
    all_curves = [run_curves(run) for run in runs]
    names = panels(all_curves)
    figure, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = labels or [label(run) for run in runs]
    handles = []
    for index, (run_label, curves) in enumerate(zip(labels, all_curves, strict=True)):
        colour = colours[index % len(colours)]
        # Twins of one recipe draw the same curve: a marker of its own keeps each run visible.
        marker = MARKERS[index % len(MARKERS)]
        style = {"color": colour, "marker": marker, "markersize": 5, "fillstyle": "none"}
        handles.append(Line2D([], [], label=run_label, **style))
        epochs = curves.get("epoch") or [float(i + 1) for i in range(len(next(iter(curves.values()))))]
        for axis, name in zip(axes[0], names, strict=True):
            series = [("lr", "-")] if name == "lr" else [(f"train_{name}", "-"), (f"val_{name}", "--")]
            for column, line in series:
                values = curves.get(column)
                if values is None:
                    continue
                pairs = zip(epochs, values, strict=True)
                points = [(e, v) for e, v in pairs if e is not None and v is not None]
                if points:
                    axis.plot(*zip(*points, strict=True), line, **style)
    for axis, name in zip(axes[0], names, strict=True):
        axis.set_title("learning rate" if name == "lr" else name)
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        if log_loss and name in LOSS_PANELS:
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
    # One legend for the figure: each run once (its colour and marker), then what the lines mean.
    handles += [
        Line2D([], [], color="grey", linestyle=s, label=w) for s, w in (("-", "train"), ("--", "val"))
    ]
    figure.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=min(len(handles), 4),
                  fontsize=8, frameon=False)  # fmt: skip
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure, names
