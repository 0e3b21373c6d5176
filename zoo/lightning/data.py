"""DataLoaders that yield zoo's seeded batch order, a whole batch per fetch.

The sampler yields index arrays, and the dataset answers each with one numpy fancy
index: no per-sample ``__getitem__`` and no collate, which would cost more than a
small model's step.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from zoo.data import Split, epoch_batches


class BatchOrder(Sampler):
    """zoo's batch order for one split; Lightning calls ``set_epoch`` every epoch."""

    def __init__(self, n: int, batch_size: int, seed: int, shuffle: bool):
        self.n, self.batch_size, self.seed, self.shuffle = n, batch_size, seed, shuffle
        self.epoch = 0
        self.skip = 0  # batches of the current epoch already trained before a resume

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        rank, world = process_group()
        batches = epoch_batches(self.n, self.batch_size, self.seed, self.epoch, self.shuffle)
        skip, self.skip = self.skip, 0
        for batch in batches[skip:]:
            # Data parallel: each process takes its contiguous share of the same global batch,
            # as tf.distribute splits a global batch across replicas.
            yield np.array_split(batch, world)[rank] if world > 1 else batch

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)


def process_group() -> tuple[int, int]:
    """(rank, world size) of the running data-parallel job; (0, 1) when there is none."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class BatchIndexed(torch.utils.data.Dataset):
    def __init__(self, split: Split):
        self.x = torch.from_numpy(split.x)
        self.y = torch.from_numpy(split.y)

    def __getitem__(self, index: np.ndarray):
        index = torch.from_numpy(index)
        return self.x[index], self.y[index]

    def __len__(self) -> int:
        return len(self.y)


class ResumableLoader(DataLoader):
    """Tells Lightning the loader is resumable: its position is a function of the restored
    step (zoo's ``ResumePosition`` callback sets ``sampler.skip``), so no state is needed."""

    def state_dict(self) -> dict:
        return {"epoch": self.sampler.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.set_epoch(state["epoch"])


def loader(split: Split, batch_size: int, seed: int = 0, shuffle: bool = False) -> DataLoader:
    sampler = BatchOrder(len(split), batch_size, seed, shuffle)
    return ResumableLoader(BatchIndexed(split), sampler=sampler, batch_size=None)
