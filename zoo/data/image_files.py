"""A split of image files that stands where an in-memory split has its array.

Everything that reads a split indexes it: ``split.x[index]`` (compare, evaluate) gets a
decoded float32 batch in the canonical layout (N, C, H, W), with the eval transform.
The training pipelines ask for more with :meth:`ImageFiles.batch`: the augmented batch of
an epoch, and channels last for Keras. Both frameworks' pipelines call that one method,
in worker processes (torch) or parallel map threads (tf.data), so what they get is the
same array whoever decodes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.data.pixels import Pixels, augmented, center, epoch_key, normalize, open_image, sample_rng


@dataclass(frozen=True, eq=False)
class ImageFiles:
    root: str
    # Paths relative to ``root`` as one numpy array of bytes: a million Python strings would
    # each have a reference count, which forked DataLoader workers touch and so copy.
    files: np.ndarray
    pixels: Pixels
    augment: bool = False  # the training split: batch(index, seed, epoch) augments
    workers: int = 0  # decoding processes (torch) / parallel map calls (tf.data); 0: in the caller

    @property
    def shape(self) -> tuple[int, int, int, int]:
        size = self.pixels.image_size
        return (len(self.files), self.pixels.channels, size, size)

    @property
    def ndim(self) -> int:
        return 4

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, key) -> np.ndarray:
        """Any numpy index (an array of indices, a slice, one int): decoded, not augmented."""
        index = np.arange(len(self))[key]
        if index.ndim == 0:
            return self.batch(index[None])[0]
        return self.batch(index)

    def path(self, i: int) -> Path:
        return Path(self.root, os.fsdecode(self.files[i]))

    def batch(
        self, index: np.ndarray, seed: int = 0, epoch: int | None = None, channels_last: bool = False
    ) -> np.ndarray:
        """Samples ``index`` decoded and normalised, float32. With an ``epoch``, a training
        split draws each sample's augmentation from (``seed``, ``epoch``, sample index)."""
        pixels = self.pixels
        augmenting = self.augment and epoch is not None and pixels.augmentation is not None
        key = epoch_key(seed, epoch) if augmenting else None
        crops = []
        for i in np.asarray(index, dtype=np.int64).reshape(-1):
            image = open_image(self.path(i), pixels.mode)
            crops.append(
                augmented(image, pixels, sample_rng(key, i)) if augmenting else center(image, pixels)
            )
        size = pixels.image_size
        stacked = np.stack(crops) if crops else np.empty((0, size, size, pixels.channels), np.uint8)
        if not channels_last:  # moved while still one byte a value
            stacked = np.ascontiguousarray(stacked.transpose(0, 3, 1, 2))
        return normalize(stacked, pixels, channels_last)
