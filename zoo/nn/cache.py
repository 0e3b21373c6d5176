"""The key/value caches a decoder twin's ``decode`` carries from one generated token to the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class DecodeCache:
    """Every block's keys and values of the tokens read so far, in the twin's own tensors.

    ``layers``: one ``(keys, values)`` pair per block, each (N, key/value heads, length, head_dim)
    (the torch twins': :class:`KeyValueSlots`, which index as that pair).
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


class _Slots:
    """Preallocated keys and values, each (N, heads, capacity, head_dim) (torch tensors), and how
    many slots hold tokens: shared by the :class:`KeyValueSlots` of successive decode calls."""

    def __init__(self, keys: Any, values: Any, filled: int):
        self.keys, self.values, self.filled = keys, values, filled


@dataclass(frozen=True)
class KeyValueSlots:
    """One block's keys and values for the torch twins' ``decode``: the first ``length`` slots of
    buffers allocated ahead (twice what is needed, up to ``limit``, the position table) and written
    in place by later tokens, where concatenating would copy every cached key and value into a new
    tensor each token (measured in bench/RESULTS.md, issue 41). Indexes as the ``(keys, values)``
    pair it stands for, each (N, heads, length, head_dim).

    Extending a cache that is not the latest of its buffers (a second continuation of the same
    prompt) copies them first, so each cache keeps meaning the tokens it was made from.
    """

    slots: _Slots | None
    length: int
    limit: int

    MIN_SLOTS = 64

    @classmethod
    def empty(cls, limit: int) -> KeyValueSlots:
        return cls(None, 0, limit)

    @property
    def keys(self) -> Any:
        return self.slots.keys[:, :, : self.length]

    @property
    def values(self) -> Any:
        return self.slots.values[:, :, : self.length]

    def __getitem__(self, index: int) -> Any:
        return (self.keys, self.values)[index]

    def __len__(self) -> int:
        return 2

    def extended(self, keys: Any, values: Any) -> KeyValueSlots:
        """These T tokens' keys and values (each (N, heads, T, head_dim)) written after the first
        ``length``: the cache of ``length + T`` tokens."""
        needed = self.length + keys.shape[2]
        slots = self.slots
        capacity = 0 if slots is None else slots.keys.shape[2]
        if slots is None or slots.filled != self.length or needed > capacity:
            capacity = max(needed, min(self.limit, max(2 * max(capacity, needed), self.MIN_SLOTS)))
            shape = (*keys.shape[:2], capacity, keys.shape[3])
            grown = _Slots(
                keys.new_zeros(shape), values.new_zeros((*shape[:3], values.shape[3])), self.length
            )
            if self.length:
                grown.keys[:, :, : self.length] = self.keys
                grown.values[:, :, : self.length] = self.values
            slots = grown
        slots.keys[:, :, self.length : needed] = keys
        slots.values[:, :, self.length : needed] = values
        slots.filled = needed
        return KeyValueSlots(slots, needed, self.limit)
