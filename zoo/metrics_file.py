"""``metrics.csv``: one row per epoch, the same columns in both frameworks, so a Lightning and
a Keras run of one recipe read (and plot) alike. It imports nothing of zoo and sits outside
``zoo.runs``, so the data package (which names a task's metrics) and the trackers (which read the
file) import it without running the run-folder package above them."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import Any

BITS_PER_CHARACTER, BITS_PER_TOKEN = "bpc", "bpt"
TASK_METRICS = {
    "classification": ("accuracy",),
    "language_modeling": (BITS_PER_CHARACTER,),
    "token_classification": ("accuracy",),
    "masked_language_modeling": ("accuracy",),
}


# trainer.metrics: what a recipe may add to its task's metrics, per task. Every one is an epoch
# value computed alike in both frameworks: top-k accuracy a mean over samples (as accuracy),
# macro F1 from the epoch's confusion counts (per class 2tp / (2tp + fp + fn), averaged over the
# classes that occur among the labels or predictions, as scikit-learn's f1_score(average="macro")
# and torchmetrics do), perplexity exp of the epoch's mean cross-entropy (2 ** bpc / bpt).
TOP_K = re.compile(r"top([1-9][0-9]*)_accuracy$")
MACRO_F1, PERPLEXITY = "macro_f1", "perplexity"
EXTRA_METRICS = {
    "classification": ("topK_accuracy", MACRO_F1),
    "language_modeling": (PERPLEXITY,),
}


def top_k(name: str) -> int | None:
    """k of a ``topK_accuracy`` metric name, else None."""
    found = TOP_K.match(name)
    return int(found.group(1)) if found else None


def extra_metric_problem(name: str, task: str) -> str | None:
    """Why ``trainer.metrics`` cannot ask for ``name`` in a ``task`` run, or None."""
    offered = EXTRA_METRICS.get(task, ())
    if name in offered or (top_k(name) is not None and "topK_accuracy" in offered):
        return None
    what = ", ".join(offered) if offered else "none"
    example = " (K a number: top5_accuracy)" if "topK_accuracy" in offered else ""
    return f"{name!r} is not a metric of a {task} run; it offers {what}{example}"


def task_metrics(task: str, tokenizer=None, extra: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The metrics a run of ``task`` logs, under the same names in both frameworks. A language
    model's loss in bits is per character (``bpc``) where its tokens are characters, and per token
    (``bpt``) where ``tokenizer`` makes tokens of several characters (BPE, WordPiece...): read as
    bits per character, that number would be several times too high."""
    if task == "language_modeling" and tokenizer is not None and tokenizer.kind != "char":
        return (BITS_PER_TOKEN, *extra)
    return (*TASK_METRICS[task], *extra)


def metric_columns(task: str, tokenizer=None, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The per-epoch CSV columns: identical for both frameworks (``extra``: trainer.metrics)."""
    metrics = task_metrics(task, tokenizer, extra)
    return [
        "epoch", "step", "lr", "train_loss", *(f"train_{m}" for m in metrics),
        "val_loss", *(f"val_{m}" for m in metrics), "epoch_seconds",
    ]  # fmt: skip


class MetricsLog:
    """Appends one row per epoch; every row is flushed, so a crash keeps what was done. ``echo``
    (zoo.progress.EpochLines) also gets each row, in the columns' order: the progress lines of a
    run whose stderr is not a terminal."""

    def __init__(self, path: Path, task: str, append: bool = False, echo=None, tokenizer=None, extra=()):
        self.path = path
        self.columns = metric_columns(task, tokenizer, extra)
        self.echo = echo
        if append and path.exists():
            return  # a resumed run continues its file
        with open(path, "w", newline="") as handle:
            csv.writer(handle).writerow(self.columns)

    @staticmethod
    def keep_until(path: Path, step: int) -> None:
        """Drop the rows of epochs that ended after ``step``: a run killed between writing an
        epoch's row and saving its state trains that epoch again, and writes it again."""
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows or "step" not in rows[0]:
            return
        column = rows[0].index("step")
        kept = [rows[0]] + [
            r for r in rows[1:] if len(r) > column and r[column].isdigit() and int(r[column]) <= step
        ]
        if len(kept) == len(rows):
            return
        temporary = path.with_name(f".{path.name}.tmp")
        with open(temporary, "w", newline="") as handle:
            csv.writer(handle).writerows(kept)
        os.replace(temporary, path)

    def append(self, row: dict[str, Any]) -> None:
        values = [_format(row.get(c)) for c in self.columns]
        with open(self.path, "a", newline="") as handle:
            csv.writer(handle).writerow(values)
        if self.echo is not None:
            self.echo.epoch({c: row.get(c) for c in self.columns})


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_metrics(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))
