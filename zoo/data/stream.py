"""A streaming split: files larger than memory, read in one seeded order by both frameworks.

A :class:`Stream` stands where an in-memory split holds its array, as an image folder's
``ImageFiles`` does: ``stream.batch(positions, seed, epoch)`` returns the examples at those
positions of that epoch's order (:mod:`zoo.data.stream_order`), decoded. Both frameworks ask
with the keys of their in-memory pipelines, (epoch, positions of one batch): DataLoader
workers each ask for every N-th batch, tf.data's parallel map calls likewise, and each
data-parallel process for its share of every batch.

Answering needs the records before the ones asked for to have gone through the shuffle
buffer, so a reader keeps a :class:`Cursor` per epoch: the epoch's records as they leave the
buffer, read once, forward only. A cursor skips the records of the batches other readers
decode without decoding them (a JSONL line it does not need is never parsed, a document it
does not need never tokenized); asked for a position it has passed, a reader starts a new
cursor from the epoch's start. A resumed run's first batch therefore costs reading the epoch
up to it; each reader holds one shuffle buffer of records, whatever the corpus size.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoo.data.dataset import Split
from zoo.data.stream_index import ShardIndex, records
from zoo.data.stream_order import epoch_stream
from zoo.data.stream_tasks import Unit
from zoo.errors import DataError
from zoo.nn.errors import GRAPH_END, GRAPH_MARK

CURSORS_PER_EPOCH = 8  # readers of one epoch a process keeps (tf.data's parallel calls; one per worker)


class UnreadableBatch(RuntimeError):
    """A batch that cannot be read (an image that opens but does not decode, a file changed
    since it was indexed), raised where it is read: a DataLoader worker, a tf.data call. Both
    frameworks re-raise it inside their own error, a traceback included; its message travels
    between zoo's input markers (:mod:`zoo.nn.errors`), so the ``zoo`` command finds it there
    and prints that line alone (exit 2)."""

    def __init__(self, message: str):
        super().__init__(message if GRAPH_MARK in message else f"{GRAPH_MARK}{message}{GRAPH_END}")


def unreadable_batch(error: BaseException) -> bool:
    """Whether ``error`` is a training batch the data could not give (a shard changed or
    deleted under the run, an image that does not decode): raised as it is, as a DataLoader
    worker's re-raised copy, or inside TensorFlow's error text. Nothing of the step it would
    have fed ran, so the training state of the step before can be saved before the run stops."""
    return isinstance(error, UnreadableBatch) or f"{UnreadableBatch.__name__}: {GRAPH_MARK}" in str(error)


@dataclass(frozen=True)
class Part:
    """The records ``start`` .. ``stop - 1`` of an indexed shard that belong to a split."""

    index: ShardIndex
    start: int
    stop: int

    @property
    def size(self) -> int:
        """Offsets the part fills in an epoch (its records, or their tokens)."""
        return self.index.total(self.start, self.stop)


class Cursor:
    """One epoch's records, read forward: ``span(start, stop)`` gives those covering the
    offsets [start, stop), keeping the ones that reach further for the next call."""

    def __init__(self, units: Iterator[Unit], key: tuple[int, int]):
        self.units, self.key = units, key
        self.held: list[Unit] = []  # read, and reaching to or past the last span's end
        self.end = 0  # the offset after the last record read
        self.busy = False

    @property
    def floor(self) -> int:
        """The smallest offset this cursor can still give."""
        return self.held[0].start if self.held else self.end

    def span(self, start: int, stop: int) -> list[Unit]:
        found = [u for u in self.held if u.start + u.size > start]
        while self.end < stop:
            unit = next(self.units, None)
            if unit is None:
                raise DataError(
                    f"the streamed files ended before offset {stop} of the epoch; have they changed "
                    "since they were indexed?"
                )
            unit.start = self.end
            self.end += unit.size
            if self.end > start:
                found.append(unit)
        self.held = [u for u in found if u.start + u.size >= stop]
        return [u for u in found if u.start < stop]


@dataclass(eq=False)
class Stream:
    parts: tuple[Part, ...]
    examples: Any  # a task of zoo.data.stream_tasks
    length: int  # examples an epoch
    buffer: int  # data.shuffle_buffer
    shuffle: bool  # the training split: shards and buffer shuffled every epoch
    workers: int = 0  # DataLoader worker processes / tf.data parallel calls
    _cursors: list[Cursor] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)  # the process the cursors belong to

    def __len__(self) -> int:
        return self.length

    def __getstate__(self) -> dict:  # to a DataLoader worker: without this process's cursors
        return {**self.__dict__, "_cursors": [], "_lock": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock(), _pid=os.getpid())

    def _forked(self) -> None:
        """Let go of cursors this process did not make. A forked DataLoader worker inherits
        its parent's (the first batch the parent read to estimate memory, say) without
        pickling: their open files are the parent's file descriptions, whose one read offset
        every process that inherited them moves. Two workers reading on from the same
        inherited cursor would each get a share of the file's lines, interleaved, not the
        file. A new process starts its cursors afresh, with files of its own."""
        if self._pid != os.getpid():
            self._cursors, self._lock, self._pid = [], threading.Lock(), os.getpid()

    @property
    def text_inputs(self) -> bool:
        """Batches carry a padding mask (and token types) besides the ids."""
        return hasattr(self.examples, "max_length")

    @property
    def shape(self) -> tuple[int, ...]:
        """As an array of the split's inputs would have it (canonical layout)."""
        first = self.examples.outputs(channels_last=False)[0]
        return (self.length, *first[2])

    @property
    def pairs(self) -> bool:
        """Sentence pairs: batches carry token types."""
        return getattr(self.examples, "pair_column", None) is not None

    def units(self, seed: int, epoch: int) -> Iterator[Unit]:
        """The epoch's records in the order they leave the shuffle buffer."""
        columns = self.examples.columns

        def read(part: Part) -> Iterator[Unit]:
            found = records(part.index, columns, part.start, part.stop)
            for (_, row, stored), size in zip(found, part.index.sizes(part.start, part.stop), strict=True):
                yield Unit(part.index.shard, row, stored, size)

        shards = [functools.partial(read, part) for part in self.parts]
        return epoch_stream(shards, seed, epoch, self.buffer, self.shuffle)

    def batch(
        self, index: np.ndarray, seed: int = 0, epoch: int | None = None, channels_last: bool = False
    ) -> tuple[np.ndarray, ...]:
        """The examples at positions ``index`` (consecutive, ascending) of ``epoch``'s order,
        as the task's arrays. ``epoch`` None (or -1) reads the first epoch's order, as an
        evaluation does: training images are not augmented, masked-LM masks are fixed."""
        positions = np.asarray(index, dtype=np.int64).reshape(-1)
        if len(positions) == 0 or np.any(np.diff(positions) != 1):
            raise DataError("a stream is read in runs of consecutive positions, not at scattered ones")
        if positions[-1] >= self.length:
            raise DataError(f"position {positions[-1]} is past the {self.length} examples of the epoch")
        start, stop = self.examples.span(positions)
        epoch = None if epoch is None or epoch < 0 else int(epoch)
        key = (seed, epoch or 0) if self.shuffle else (0, 0)
        cursor = self._cursor(key, start)
        try:
            units = cursor.span(start, stop)
            return self.examples.decode(units, positions, seed, epoch, channels_last)
        except BaseException as error:
            with self._lock:  # its reading stopped with the error: a later read starts afresh
                self._cursors = [c for c in self._cursors if c is not cursor]
            if isinstance(error, DataError):
                raise UnreadableBatch(str(error)) from None
            raise
        finally:
            cursor.busy = False

    def __getitem__(self, key) -> np.ndarray:
        """Any numpy index: the inputs at those positions of the first epoch's order, not
        augmented (what code written for an in-memory ``split.x[index]`` reads)."""
        return self.take(key)[0]

    def take(self, key) -> tuple[np.ndarray | None, ...]:
        """Every array of the examples at any numpy index of positions, in the index's order:
        read a run of consecutive positions at a time."""
        positions = positions_at(key, self.length)
        if positions.ndim == 0:
            return tuple(None if a is None else a[0] for a in self.take(positions[None]))
        if not len(positions):
            return self.empty()
        order = np.argsort(positions, kind="stable")
        ordered = positions[order]
        runs = np.split(ordered, np.flatnonzero(np.diff(ordered) != 1) + 1)
        parts = [self.batch(run) for run in runs]
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        joined = [
            None if a is None else np.concatenate([p[i] for p in parts]) for i, a in enumerate(parts[0])
        ]
        return tuple(None if a is None else a[inverse] for a in joined)

    def empty(self) -> tuple[np.ndarray | None, ...]:
        arrays = [np.empty((0, *shape), dtype) for _, dtype, shape in self.examples.outputs(False)]
        if self.text_inputs and not self.pairs:  # no token types: (ids, mask, None, labels)
            arrays.insert(2, None)
        return tuple(arrays)

    def _cursor(self, key: tuple[int, int], start: int) -> Cursor:
        """The idle cursor of this epoch furthest on that has not passed ``start``, else a new one."""
        self._forked()
        with self._lock:
            fits = [c for c in self._cursors if c.key == key and not c.busy and c.floor <= start]
            if fits:
                cursor = max(fits, key=lambda c: c.floor)
            else:
                self._cursors = [c for c in self._cursors if c.key == key or c.busy]  # an epoch done
                mine = [c for c in self._cursors if c.key == key and not c.busy]
                if len(mine) >= CURSORS_PER_EPOCH:
                    self._cursors.remove(min(mine, key=lambda c: c.floor))
                cursor = Cursor(self.units(*key), key)
                self._cursors.append(cursor)
            cursor.busy = True
            return cursor


def positions_at(key, length: int) -> np.ndarray:
    """``np.arange(length)[key]``, without the arange when ``key`` is a slice or integers: an
    epoch of a large corpus has tens of millions of positions, and reading a few of them (the
    memory estimate reads the first batch) must not hold them all."""
    if isinstance(key, slice):
        return np.arange(*key.indices(length), dtype=np.int64)
    index = np.asarray(key)
    if index.dtype.kind not in "iu":
        return np.arange(length)[key]  # a mask, or anything else numpy makes of a key
    index = index.astype(np.int64)
    outside = index[(index < -length) | (index >= length)]
    if outside.size:
        raise IndexError(f"index {outside[0]} is out of bounds for a stream of {length} examples")
    return np.where(index < 0, index + length, index)


@dataclass(frozen=True)
class StreamLabels:
    """A streamed split's ``y``: indexing it reads the labels of those positions."""

    stream: Stream

    def __len__(self) -> int:
        return len(self.stream)

    def __getitem__(self, key) -> np.ndarray:
        return self.stream.take(key)[-1]


@dataclass(frozen=True)
class StreamSplit(Split):
    """A split whose examples are streamed: ``x`` is the :class:`Stream`, no array holds them;
    ``y`` reads their labels."""

    def __len__(self) -> int:
        return len(self.x)

    @property
    def has_text_inputs(self) -> bool:
        return self.x.text_inputs
