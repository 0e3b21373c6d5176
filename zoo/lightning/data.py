"""DataLoaders that yield zoo's seeded batch order, a whole batch per fetch.

The sampler yields index arrays, and the dataset answers each with one numpy fancy
index: no per-sample ``__getitem__`` and no collate, which would cost more than a
small model's step. Image files (``ImageFiles``) are decoded by worker processes instead:
the sampler then yields (epoch, index) keys, because a training batch's augmentation
depends on its epoch and the workers cannot see the sampler's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler

from zoo.data import Split, epoch_batches
from zoo.data.image_files import ImageFiles
from zoo.data.stream import Stream
from zoo.runs.folder import HELD_LOCKS


class BatchOrder(Sampler):
    """zoo's batch order for one split; Lightning calls ``set_epoch`` every epoch."""

    def __init__(self, n: int, batch_size: int, seed: int, shuffle: bool, keyed: bool = False):
        self.n, self.batch_size, self.seed, self.shuffle = n, batch_size, seed, shuffle
        self.keyed = keyed  # yield (epoch, index) instead of index
        self.epoch = 0
        self.skip = 0  # batches of the current epoch already trained before a resume

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        rank, world = process_group()
        skip, self.skip = self.skip, 0
        for batch in self._batches(skip):
            # Data parallel: each process takes its contiguous share of the same global batch,
            # as tf.distribute splits a global batch across replicas.
            share = np.array_split(batch, world)[rank] if world > 1 else batch
            yield (self.epoch, share) if self.keyed else share

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def _batches(self, skip: int) -> Iterable[np.ndarray]:
        if self.shuffle:
            return epoch_batches(self.n, self.batch_size, self.seed, self.epoch)[skip:]
        # Stored order (a stream's own order, evaluation): each batch made as it is asked for, as
        # epoch_batches would give it; an epoch of a large streamed corpus has tens of millions of
        # positions, not to be held (nor a view object a batch of them).
        starts = range(skip * self.batch_size, self.n, self.batch_size)
        return (np.arange(s, min(s + self.batch_size, self.n), dtype=np.int64) for s in starts)


def process_group() -> tuple[int, int]:
    """(rank, world size) of the running data-parallel job; (0, 1) when there is none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class BatchIndexed(torch.utils.data.Dataset):
    """(x, y), or (ids, padding_mask, token_types or None, y) for a split with a padding mask or
    token types."""

    def __init__(self, split: Split):
        self.x = torch.from_numpy(split.x)
        self.y = torch.from_numpy(split.y)
        self.text = split.has_text_inputs
        self.mask = None if split.mask is None else torch.from_numpy(split.mask)
        self.types = None if split.token_types is None else torch.from_numpy(split.token_types)

    def __getitem__(self, index: np.ndarray):
        index = torch.from_numpy(index)
        if not self.text:
            return self.x[index], self.y[index]
        mask = None if self.mask is None else self.mask[index]
        types = None if self.types is None else self.types[index]
        return self.x[index], mask, types, self.y[index]

    def __len__(self) -> int:
        return len(self.y)


class DecodedBatches(torch.utils.data.Dataset):
    """Answers an (epoch, index) key with the decoded batch (augmented on a training split)."""

    def __init__(self, split: Split, seed: int):
        self.images: ImageFiles = split.x  # type: ignore[assignment]
        self.y, self.seed = split.y, seed

    def __getitem__(self, key: tuple[int, np.ndarray]):
        epoch, index = key
        x = self.images.batch(index, self.seed, epoch)
        return torch.from_numpy(x), torch.from_numpy(self.y[index])

    def __len__(self) -> int:
        return len(self.y)


class MaskedBatches(torch.utils.data.Dataset):
    """Answers an (epoch, index) key with masked-LM (inputs, labels): the masks are drawn from
    the seed, the epoch and the sample indices (:mod:`zoo.data.masking`), as in tf.data."""

    def __init__(self, split: Split, seed: int):
        self.x, self.masking, self.seed = split.x, split.masking, seed

    def __getitem__(self, key: tuple[int, np.ndarray]):
        epoch, index = key
        inputs, labels = self.masking.apply(self.x[index], index, self.seed, epoch)
        return torch.from_numpy(inputs), torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.x)


class StreamBatches(torch.utils.data.Dataset):
    """Answers an (epoch, positions) key with the examples the stream's seeded order puts there
    (:mod:`zoo.data.stream`); the stream shuffles itself, so the sampler's positions are in order.
    Each worker process reads the stream with its own cursor, decoding only its batches."""

    def __init__(self, split: Split, seed: int):
        self.stream: Stream = split.x  # type: ignore[assignment]
        self.seed = seed

    def __getitem__(self, key: tuple[int, np.ndarray]):
        epoch, index = key
        arrays = self.stream.batch(index, self.seed, epoch)
        return tuple(None if a is None else torch.from_numpy(a) for a in arrays)

    def __len__(self) -> int:
        return len(self.stream)


class OnFirstFetch:
    """An iterator that creates the loader's own at the first ``next``.

    Lightning creates the training iterator before ``on_train_start``, where zoo's
    ``ResumePosition`` sets the epoch and the batches to skip; worker processes take their
    first keys from the sampler the moment their iterator exists, so it must not exist yet.
    """

    def __init__(self, start):
        self.start, self.iterator = start, None

    def __iter__(self):
        return self

    def __next__(self):
        if self.iterator is None:
            self.iterator = self.start()
        return next(self.iterator)


class ResumableLoader(DataLoader):
    """Tells Lightning the loader is resumable: its position is a function of the restored
    step (zoo's ``ResumePosition`` callback sets ``sampler.skip``), so no state is needed."""

    def __iter__(self):
        if self.num_workers == 0:
            return super().__iter__()
        return OnFirstFetch(super().__iter__)

    def state_dict(self) -> dict:
        return {"epoch": self.sampler.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.set_epoch(state["epoch"])


def release_run_locks(worker: int) -> None:
    """A forked worker shares the run folder's lock with the training process (an ``flock``
    belongs to the open file, which fork shares): were it to keep its copy, the lock would
    outlive a training process killed with SIGKILL until its workers noticed (seconds), and
    ``zoo resume`` would be refused meanwhile. The worker needs no lock: it lets go of it."""
    for fd in HELD_LOCKS.values():
        os.close(fd)
    HELD_LOCKS.clear()


def loader(
    split: Split, batch_size: int, seed: int = 0, shuffle: bool = False, pin_memory: bool = False
) -> DataLoader:
    """``pin_memory`` (training on a GPU) applies to image files, decoded into new tensors each
    batch; in-memory arrays are indexed in place and moved as they are."""
    if isinstance(split.x, ImageFiles | Stream):
        workers = split.x.workers
        streamed = isinstance(split.x, Stream)  # in its own seeded order: the sampler's is the identity
        return ResumableLoader(
            StreamBatches(split, seed) if streamed else DecodedBatches(split, seed),
            sampler=BatchOrder(len(split), batch_size, seed, shuffle and not streamed, keyed=True),
            batch_size=None,
            num_workers=workers,
            pin_memory=pin_memory,
            persistent_workers=workers > 0,
            worker_init_fn=release_run_locks,
        )
    if split.masking is not None:
        sampler = BatchOrder(len(split), batch_size, seed, shuffle, keyed=True)
        return ResumableLoader(MaskedBatches(split, seed), sampler=sampler, batch_size=None)
    sampler = BatchOrder(len(split), batch_size, seed, shuffle)
    return ResumableLoader(BatchIndexed(split), sampler=sampler, batch_size=None)
