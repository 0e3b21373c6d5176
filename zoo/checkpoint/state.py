"""Training state for exact resumption: where it lives, how it is written, which to resume.

Each framework saves its own full state (weights, optimizer, loop position, RNG) under
``RUN_DIR/state/`` every ``export.state_every_n_steps`` steps and at every epoch end,
always as a new file renamed into place, so a kill during a save leaves the previous
state intact. Only the last ``export.keep_states`` are kept. The data order and the
per-batch seeds are functions of (seed, epoch, batch), so continuing from a state
replays exactly what the uninterrupted run would have done.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from zoo.checkpoint.file import CheckpointError

STATE_DIR = "state"
PATTERN = re.compile(r"step-(\d{9})\.(ckpt|safetensors)$")


def state_dir(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_DIR


def state_path(run_dir: Path, step: int, suffix: str) -> Path:
    return state_dir(run_dir) / f"step-{step:09d}.{suffix}"


def states(run_dir: Path) -> list[Path]:
    """Saved states, oldest first (temporary files of an interrupted save are not states)."""
    folder = state_dir(run_dir)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if PATTERN.match(p.name)]
    return sorted(found, key=lambda p: int(PATTERN.match(p.name).group(1)))


def latest_state(run_dir: Path) -> Path | None:
    found = states(run_dir)
    return found[-1] if found else None


def checksum_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".crc32")


def crc32(path: Path) -> str:
    """The file's CRC-32: a flipped byte or a cut-short file is named before a reader trips on it
    (neither a zip of pickles nor safetensors checks its tensor bytes). Read while the file is
    still in the page cache after its write: ~1 GB/s."""
    value = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            value = zlib.crc32(chunk, value)
    return f"{value:08x}"


def commit(temporary: Path, final: Path, keep: int) -> None:
    """fsync the new state, write its checksum, rename it into place, then drop all but the
    ``keep`` newest (with their checksums)."""
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    digest = checksum_path(final)
    written = digest.with_name(f".{digest.name}.tmp")
    written.write_text(crc32(temporary) + "\n")
    os.replace(written, digest)  # before the state: a state is never there without its own checksum
    os.replace(temporary, final)
    for old in states(final.parent.parent)[:-keep]:
        old.unlink(missing_ok=True)
        checksum_path(old).unlink(missing_ok=True)


def step_of(path: Path) -> int:
    """The optimizer step a state file was saved at (its name says it)."""
    return int(PATTERN.match(Path(path).name).group(1))


def check_state(path: Path, state_problem: Callable[[Path], str | None]) -> None:
    """Open a training state the way resume will, before anything else happens: a damaged or
    tampered file is named in zoo's words, never as torch's unpickling traceback (whose advice,
    ``weights_only=False``, would run whatever code the file carries). ``state_problem`` is the
    writing backend's reader (:meth:`zoo.backend.Backend.check_state` passes its own)."""
    path = Path(path)
    older = [p for p in states(path.parent.parent) if p != path]
    fix = (
        f"delete it to resume from the state before ({older[-1].name})"
        if older
        else "train the recipe again (no older state is kept)"
    )
    try:
        problem = _checksum_problem(path) or state_problem(path)
    except Exception as error:  # whatever the reader raises about bytes it cannot parse
        problem = f"it cannot be read ({type(error).__name__})"
    if problem:
        raise CheckpointError(
            f"{path}: not a usable training state: {problem}; it is damaged or was changed since zoo "
            f"wrote it. zoo loads states without running code in them; {fix}"
        )


def _checksum_problem(path: Path) -> str | None:
    """A state saved with a checksum must still match it (states written before zoo kept one
    are judged by their structure alone)."""
    digest = checksum_path(path)
    if not digest.is_file():
        return None
    expected = digest.read_text().strip()
    found = crc32(path)
    return None if found == expected else f"its CRC-32 is {found}, {digest.name} says {expected}"


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """The RNG seed of one training batch: dropout depends on where it is, not on history."""
    return int(np.random.SeedSequence([seed, epoch, batch]).generate_state(1)[0])
