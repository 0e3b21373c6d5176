"""The key/value caches a decoder twin's ``decode`` carries from one generated token to the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


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


class StaticCache(NamedTuple):
    """A preallocated key/value cache of one shape from the prompt to the last token: what the
    Keras twin's compiled decode step (``zoo.nn.keras.decoder``) reads and writes in place of
    :class:`DecodeCache`, which grows (a new shape, so a new trace) every token.

    ``layers``: one ``(keys, values)`` pair per block, each (N, key/value heads, max_length,
    head_dim); the slots from ``length`` on hold zeros and are blocked from attention.
    ``padding``: (N, max_length) bool, True at the prompt's padding (False after the prompt).
    ``pads``: (N,) int32, each row's padding count: the token in slot s is at position s - pads.
    ``length``: the slots written so far, where the next token goes; a Python int outside the
    compiled step, a scalar int32 tensor inside it. A NamedTuple, so ``tf.function`` takes it.
    """

    layers: tuple[tuple[Any, Any], ...]
    padding: Any
    pads: Any
    length: Any

    @property
    def max_length(self) -> int:
        return int(self.padding.shape[1])
