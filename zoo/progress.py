"""One progress bar for long work that is not training: compare, import, export, deploy checks.

Training shows its framework's own bar (Lightning's, Keras' ``fit``). Everything else that can take
more than a few seconds on a real model (comparing GPT-2's twins, converting a 1 GB checkpoint)
shows a tqdm bar on stderr, so stdout stays the command's answer. A stderr that is not a terminal
gets no bar (tqdm's own rule), and ``--quiet`` / ``--json`` turn bars off for the whole command
with :func:`silenced`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

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
    from tqdm import tqdm

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
