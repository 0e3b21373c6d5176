"""Outputs that would destroy what a command reads: refused before anything is written.

``--overwrite`` lets a command replace an older output of its own; it never lets the output
land on the command's input (``zoo export model.safetensors --format hf --out
model.safetensors``): the input would be replaced by a file of another layout, and the
checkpoint it came from would be gone. A path a command writes *is* an input when it resolves
to the same file (links followed), or when it is a folder the command replaces that holds one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def refuse_inputs_as_outputs(
    writes: Iterable[Path], reads: Iterable[Path], error: type[Exception], option: str = "--out"
) -> None:
    """Raise ``error`` naming ``option`` where a path of ``writes`` (each replaced whole, a folder
    with everything in it) is, or holds, a path of ``reads``."""
    sources = [(path, path.resolve()) for path in map(Path, reads) if path.exists()]
    for target in map(Path, writes):
        if not target.exists():
            continue  # a new file replaces nothing
        replaced = target.resolve()
        for source, real in sources:
            if real == replaced:
                relation = (
                    "is an input of this command" if target == source else f"resolves to {source}, an input"
                )
                raise error(
                    f"{option}: {target} {relation}: writing it would destroy the input (--overwrite never "
                    f"replaces an input); choose another {option}"
                )
            if replaced in real.parents:
                raise error(
                    f"{option}: {target} holds {source}, an input of this command: replacing the folder "
                    f"would destroy the input (--overwrite never replaces an input); choose another {option}"
                )
