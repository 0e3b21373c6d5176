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


def step_of(path: Path) -> int:
    """The optimizer step a state file was saved at (its name says it)."""
    return int(PATTERN.match(Path(path).name).group(1))


def check_state(path: Path) -> None:
    """Open a training state the way resume will, before anything else happens: a damaged or
    tampered file is named in zoo's words, never as torch's unpickling traceback (whose advice,
    ``weights_only=False``, would run whatever code the file carries)."""
    from zoo.checkpoint import CheckpointError

    path = Path(path)
    older = [p for p in states(path.parent.parent) if p != path]
    fix = (
        f"delete it to resume from the state before ({older[-1].name})"
        if older
        else "train the recipe again (no older state is kept)"
    )
    try:
        problem = _ckpt_problem(path) if path.suffix == ".ckpt" else _keras_state_problem(path)
    except Exception as error:  # whatever the reader raises about bytes it cannot parse
        problem = f"it cannot be read ({type(error).__name__})"
    if problem:
        raise CheckpointError(
            f"{path}: not a usable training state: {problem}; it is damaged or was changed since zoo "
            f"wrote it. zoo loads states without running code in them; {fix}"
        )


def _ckpt_problem(path: Path) -> str | None:
    import torch

    loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    needed = {"state_dict", "optimizer_states", "loops", "global_step"}
    if not isinstance(loaded, dict) or not needed <= loaded.keys():
        return f"Lightning's {', '.join(sorted(needed))} are not all there"
    return None


def _keras_state_problem(path: Path) -> str | None:
    import json

    from safetensors import safe_open

    with safe_open(str(path), framework="np") as handle:
        position = json.loads((handle.metadata() or {}).get("position", "null"))
        keys = list(handle.keys())
    fields = ("batches_done", "epoch", "batch")
    if not isinstance(position, dict) or not all(isinstance(position.get(f), int) for f in fields):
        return "its loop position (metadata 'position') is missing or not whole numbers"
    if not any(k.startswith("model/") for k in keys):
        return "it holds no model variables"
    return None


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """The RNG seed of one training batch: dropout depends on where it is, not on history."""
    import numpy as np

    return int(np.random.SeedSequence([seed, epoch, batch]).generate_state(1)[0])
