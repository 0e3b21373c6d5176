"""Datasets as numpy arrays (or image files decoded batch by batch), and the one seeded
batch order both frameworks consume.

Arrays are in the canonical (torch) layout: images (N, C, H, W), sequences (N, T, F).
The Keras side moves channels last itself. An image folder's split holds an
:class:`~zoo.data.image_files.ImageFiles` in place of its array: indexing it decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo.data.batches import epoch_batches, epoch_order, steps_per_epoch

if TYPE_CHECKING:
    from zoo.data.image_files import ImageFiles

__all__ = ["Dataset", "Split", "epoch_batches", "epoch_order", "load_dataset", "steps_per_epoch"]


@dataclass(frozen=True)
class Split:
    x: np.ndarray | ImageFiles  # ImageFiles: ``x[index]`` decodes that batch
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Dataset:
    train: Split
    val: Split
    test: Split
    task: str
    info: dict[str, Any] = field(default_factory=dict)  # fields the model config takes from the data
    vocab: str | None = None  # language modeling: the character of each token id
    classes: tuple[str, ...] = ()  # the name of each label id, where the data names them (image folders)


class DataError(ValueError):
    """User data that cannot be used, with what was expected instead."""


def load_dataset(cfg, input_kind: str, vocab: str | None = None, extend_vocab: bool = False) -> Dataset:
    """``vocab`` (a checkpoint's) keeps a language model's token ids when it meets new text;
    ``extend_vocab`` appends the characters it lacks instead of refusing them."""
    if cfg.name == "digits":
        from zoo.data.digits import load_digits

        return load_digits(cfg, input_kind)
    if cfg.name == "text":
        from zoo.data.text import load_text

        return load_text(cfg, vocab, extend_vocab)
    if cfg.name == "npz":
        from zoo.data.npz import load_npz

        return load_npz(cfg, input_kind)
    if cfg.name == "image_folder":
        from zoo.data.image_folder import load_image_folder

        return load_image_folder(cfg, input_kind)
    raise DataError(f"data.name {cfg.name!r} has no loader")


def image_info(x: np.ndarray, y_all: list[np.ndarray]) -> dict[str, Any]:
    return {
        "in_channels": int(x.shape[1]),
        "image_size": int(x.shape[2]),
        "num_classes": int(max(int(y.max()) for y in y_all if len(y)) + 1),
    }


def sequence_info(x: np.ndarray, y_all: list[np.ndarray]) -> dict[str, Any]:
    return {
        "task": "classification",
        "input_size": int(x.shape[2]),
        "num_classes": int(max(int(y.max()) for y in y_all if len(y)) + 1),
    }
