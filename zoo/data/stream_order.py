"""The order of a streaming split's records: written once, read the same by both frameworks.

An epoch's order is a pure function of (seed, epoch) and the number of records in each shard;
no record's content, no process, worker or thread takes part in it:

1. the shards are taken in a seeded order (stored order when the split is not shuffled);
2. their records are read one shard after the other, each shard in file order;
3. they pass through a shuffle buffer of ``size`` records: once it is full, each record read
   takes the place of a random one, which leaves; when the shards are done, the records still
   in the buffer leave in a random order. Memory holds ``size`` records, never the epoch.

The n-th record to leave the buffer is the example at *position* n of the epoch. Batch ``i``
is positions ``[i * batch_size, (i + 1) * batch_size)``; every reader (a DataLoader worker, a
tf.data parallel call, a data-parallel process) asks for positions and gets the records the one
order puts there. A resumed run asks for the positions after the last one it trained on.

The constants below fix the draws: changing them changes every epoch's order (a resumed run
would no longer continue the one it resumes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")

ORDER_STREAM = 0x5354_524D  # separates these draws from every other generator seeded by (seed, epoch)
DRAWS = 4096  # buffer slots drawn at once (one numpy call per DRAWS records)


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of one epoch's shard order and buffer draws, in that order."""
    return np.random.default_rng([seed, epoch, ORDER_STREAM])


def shard_order(count: int, rng: np.random.Generator | None) -> list[int]:
    """The shards in the order they are read: seeded, or stored (``rng`` None)."""
    return list(range(count)) if rng is None else rng.permutation(count).tolist()


def buffered(items: Iterable[T], size: int, rng: np.random.Generator | None) -> Iterator[T]:
    """``items`` through a shuffle buffer of ``size``: the same draws for the same count of
    items, whatever they are (``rng`` None, or a size under 2: in the order they come)."""
    if rng is None or size < 2:
        yield from items
        return
    buffer: list[T] = []
    slots: Iterator[int] = iter(())
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        slot = next(slots, None)
        if slot is None:
            slots = iter(rng.integers(0, size, DRAWS).tolist())
            slot = next(slots)
        yield buffer[slot]
        buffer[slot] = item
    for slot in rng.permutation(len(buffer)).tolist():
        yield buffer[slot]


def epoch_stream(
    shards: Sequence[Callable[[], Iterable[T]]], seed: int, epoch: int, buffer: int, shuffle: bool = True
) -> Iterator[T]:
    """One epoch's records: ``shards[s]()`` reads shard ``s`` in file order; the shards are
    taken in the epoch's order, then mixed by the buffer (stored order when not ``shuffle``)."""
    rng = epoch_rng(seed, epoch) if shuffle else None
    order = shard_order(len(shards), rng)  # drawn before the buffer's slots
    return buffered((item for s in order for item in shards[s]()), buffer, rng)


def epoch_ids(counts: Sequence[int], seed: int, epoch: int, buffer: int, shuffle: bool = True) -> Iterator:
    """The records of one epoch by id (a shard's records are numbered after the shards stored
    before it), in the order the examples come: the order itself, without reading anything."""
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
    shards = [functools.partial(range, starts[s], starts[s + 1]) for s in range(len(counts))]
    return epoch_stream(shards, seed, epoch, buffer, shuffle)


def batch_positions(batch: int, batch_size: int, total: int, rank: int = 0, world: int = 1) -> np.ndarray:
    """The positions of batch ``batch`` a data-parallel process ``rank`` of ``world`` reads: its
    contiguous share of the global batch, as tf.distribute splits a batch over replicas."""
    positions = np.arange(batch * batch_size, min((batch + 1) * batch_size, total), dtype=np.int64)
    return np.array_split(positions, world)[rank] if world > 1 else positions
