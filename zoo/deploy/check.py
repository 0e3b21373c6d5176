"""Every export is run before it is kept: the same batches through the exported artifact and
through the training model, at several batch sizes and sequence lengths.

An export is written under a temporary name beside its target and moved into place only
when it loads and agrees; otherwise it is removed and the error says which batch differed
and by how much. The tolerance is the float32 parity tolerance of the twins
(tests/test_random_parity.py's ``FORWARD``): ``1e-5 * max(1, max |reference|)``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.checkpoint.file import CheckpointError

RELATIVE = 1e-5

Runner = Callable[[dict[str, np.ndarray]], np.ndarray]


class ExportError(CheckpointError):
    """An export that cannot be made, cannot be loaded by its runtime, or computes otherwise."""


@dataclass(frozen=True)
class Check:
    """One batch through the artifact and the training model."""

    batch: int
    steps: int  # 0 for inputs without a sequence axis
    max_diff: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_diff <= self.tolerance

    def describe(self) -> str:
        shape = f"batch {self.batch}" + (f", {self.steps} steps" if self.steps else "")
        return f"{shape}: max |diff| {self.max_diff:.3g} (tolerance {self.tolerance:.3g})"


def compare(batch: int, steps: int, got: np.ndarray, expected: np.ndarray) -> Check:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    if got.shape != expected.shape:
        return Check(batch, steps, float("inf"), RELATIVE * scale)
    diff = float(np.max(np.abs(got - expected))) if got.size else 0.0
    return Check(batch, steps, diff if np.isfinite(diff) else float("inf"), RELATIVE * scale)


def run_checks(
    batches: list[tuple[int, int, dict[str, np.ndarray]]], artifact: Runner, reference: Runner, what: str
) -> list[Check]:
    """Every batch through both; raises :class:`ExportError` naming each batch that disagrees."""
    checks = []
    for size, steps, inputs in batches:
        try:
            got = artifact(inputs)
        except Exception as error:
            raise ExportError(
                f"{what}: the exported model fails on {_shape(inputs)}: {first_line(error)}"
            ) from None
        checks.append(compare(size, steps, got, reference(inputs)))
    failed = [c for c in checks if not c.passed]
    if failed:
        raise ExportError(
            f"{what}: the exported model disagrees with the training model "
            + "; ".join(c.describe() for c in failed)
            + ". It was removed."
        )
    return checks


def _shape(inputs: dict[str, np.ndarray]) -> str:
    return ", ".join(f"{name} {list(value.shape)}" for name, value in inputs.items())


def first_line(error: BaseException) -> str:
    """An exporter's or runtime's error, cut to its first line (they run to pages)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip() or type(error).__name__
    lines = text.splitlines()
    if "## Exception summary" in lines:  # torch.onnx's report: the cause is below its advice
        lines = [line for line in lines[lines.index("## Exception summary") + 1 :] if line.strip()] or lines
    return lines[0][:400]


@contextmanager
def staged(target: Path, overwrite: bool) -> Iterator[Path]:
    """A temporary path beside ``target`` to write to; moved onto ``target`` when the block
    ends without an error, removed otherwise (an export that failed its check leaves nothing)."""
    if target.exists() and not overwrite:
        raise ExportError(f"{target}: already exists; choose another --out or pass --overwrite")
    target.parent.mkdir(parents=True, exist_ok=True)
    # The suffix stays last: torch.export.load wants a name ending in .pt2.
    temporary = target.with_name(f".{target.stem}.{os.getpid()}.tmp{target.suffix}")
    _remove(temporary)
    try:
        yield temporary
        if not temporary.exists():
            raise ExportError(f"{target}: the exporter wrote nothing")
        _remove(target)
        os.replace(temporary, target)
    finally:
        _remove(temporary)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
