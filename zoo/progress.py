"""Progress on stderr, so stdout stays the command's answer: training's, and one progress bar for
long work that is not training (compare, import, export, deploy checks).

Training on a terminal shows its framework's own bar (Lightning's, Keras' ``fit``), sent to stderr;
anywhere else (a log file, a pipe, a CI console) a bar would write carriage-return frames and
escape codes, so training writes one line per epoch instead (:class:`EpochLines`), as Keras'
``verbose=2`` does, the same line in both frameworks. Everything else that can take more than a
few seconds on a real model (comparing GPT-2's twins, converting a 1 GB checkpoint) shows a tqdm
bar on stderr. A stderr that is not a terminal gets no bar (tqdm's own rule), and ``--quiet`` /
``--json`` turn those bars off for the whole command with :func:`silenced`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Literal, TypeVar

from tqdm import tqdm

T = TypeVar("T")

_silenced = False


@contextlib.contextmanager
def silenced(on: bool = True) -> Iterator[None]:
    """No progress bars inside the block (``--quiet``, ``--json``, tests)."""
    global _silenced
    before, _silenced = _silenced, _silenced or on
    try:
        yield
    finally:
        _silenced = before


def bar(total: int | None, desc: str, unit: str = "step"):
    """A tqdm bar on stderr that the caller ``update()``s; use it as a context manager."""
    return tqdm(
        total=total, desc=desc, unit=unit, leave=False, file=sys.stderr, dynamic_ncols=True,
        disable=True if _silenced else None,
    )  # fmt: skip


def track(items: Iterable[T], desc: str, total: int | None = None, unit: str = "step") -> Iterator[T]:
    """Iterate ``items`` with a bar (``total`` defaults to ``len(items)`` where it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, unit) as shown:
        for item in items:
            yield item
            shown.update(1)


def training_progress(progress_bar: bool) -> Literal["bar", "lines", "none"]:
    """How training shows its progress (``trainer.progress_bar``): the framework's bar where
    stderr is a terminal, one line per epoch where it is not, nothing when switched off."""
    if not progress_bar:
        return "none"
    return "bar" if sys.stderr.isatty() else "lines"


def bar_on_stderr(progress: str) -> contextlib.AbstractContextManager:
    """Around ``fit``: Lightning and Keras draw their bars on stdout, which is for the command's
    answer (``zoo train > result.txt`` on a terminal keeps only the result)."""
    return contextlib.redirect_stdout(sys.stderr) if progress == "bar" else contextlib.nullcontext()


class EpochLines:
    """One line per epoch on stderr, from the row both frameworks write to ``metrics.csv``:
    ``epoch 3/30 - 2.1 s - train_loss 0.4123 - ... - val_accuracy 0.912 - lr 0.00187``."""

    def __init__(self, epochs: int):
        self.epochs = epochs

    def epoch(self, row: dict[str, Any]) -> None:
        print(self.line(row), file=sys.stderr, flush=True)

    def line(self, row: dict[str, Any]) -> str:
        parts = [f"epoch {row.get('epoch')}/{self.epochs}"]
        if row.get("epoch_seconds") is not None:
            parts.append(f"{row['epoch_seconds']:.1f} s")
        for name, value in row.items():
            if name not in ("epoch", "step", "epoch_seconds", "lr") and value is not None:
                parts.append(f"{name} {value:.4g}")
        if row.get("lr") is not None:
            parts.append(f"lr {row['lr']:.3g}")
        return " - ".join(parts)
