"""The key/value cache a decoder twin's ``decode`` carries from one generated token to the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DecodeCache:
    """Every block's keys and values of the tokens read so far, in the twin's own tensors.

    ``layers``: one ``(keys, values)`` pair per block, each (N, key/value heads, length, head_dim).
    ``padding``: (N, length) bool, True at padding, or None when nothing was padded; later
    tokens' positions count only the real tokens before them, and padding stays blocked.
    """

    layers: tuple[tuple[Any, Any], ...]
    padding: Any
    length: int
