"""Where zoo keeps what it can make again but would rather not: ``$ZOO_CACHE`` (default
``~/.cache/zoo``), one folder per kind (imported checkpoints, trained tokenizers, stream indexes,
the embedded digits). Everything under it is keyed by what made it, so deleting it loses nothing."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_VARIABLE = "ZOO_CACHE"


def cache_dir(kind: str = "") -> Path:
    """``$ZOO_CACHE/kind`` (not created: the writer makes it when it has something to keep)."""
    root = Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "zoo")
    return root / kind if kind else root
