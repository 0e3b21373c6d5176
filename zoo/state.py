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
from pathlib import Path

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


def commit(temporary: Path, final: Path, keep: int) -> None:
    """fsync the new state, rename it into place, then drop all but the ``keep`` newest."""
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, final)
    for old in states(final.parent.parent)[:-keep]:
        old.unlink(missing_ok=True)


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """The RNG seed of one training batch: dropout depends on where it is, not on history."""
    import numpy as np

    return int(np.random.SeedSequence([seed, epoch, batch]).generate_state(1)[0])
