"""What every loader returns: a :class:`Dataset` of three :class:`Split` s, and the fields a
model config takes from the data. The bottom of the data package: the loaders
(``zoo.data.digits``, ``zoo.data.text``...) import it, and :func:`zoo.data.load_dataset` picks a
loader, so a loader never imports the package that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo.metrics_file import task_metrics

if TYPE_CHECKING:
    from zoo.data.image_files import ImageFiles
    from zoo.data.masking import Masking
    from zoo.tokenizer import Tokenizer

IGNORE_INDEX = -100  # a label that no loss or metric counts (torch's cross_entropy default)


@dataclass(frozen=True)
class Split:
    x: np.ndarray | ImageFiles  # ImageFiles: ``x[index]`` decodes that batch
    y: np.ndarray
    mask: np.ndarray | None = None  # (N, T) bool, True marks padding
    token_types: np.ndarray | None = None  # (N, T) int64 segment ids (sentence pairs)
    # Masked language modeling: inputs and labels are drawn from ``x`` per batch, from the
    # seeded batch order (``y`` holds the original ids).
    masking: Masking | None = None

    def __len__(self) -> int:
        return len(self.y)

    @property
    def has_text_inputs(self) -> bool:
        """Whether batches carry a padding mask or token types besides the ids."""
        return self.mask is not None or self.token_types is not None

    def take(self, index: np.ndarray) -> Split:
        """The samples at ``index``, every array alike."""
        return Split(
            self.x[index], self.y[index],
            None if self.mask is None else self.mask[index],
            None if self.token_types is None else self.token_types[index],
            self.masking,
        )  # fmt: skip


@dataclass(frozen=True)
class Dataset:
    train: Split
    val: Split
    test: Split
    task: str
    info: dict[str, Any] = field(default_factory=dict)  # fields the model config takes from the data
    vocab: str | None = None  # language modeling: the character of each token id
    classes: tuple[str, ...] = ()  # the name of each label id, where the data names them
    tokenizer: Tokenizer | None = None  # text: what turned it into ids; travels with the checkpoint
    notes: tuple[str, ...] = ()  # what loading did that a user should hear (texts truncated...)

    @property
    def metrics(self) -> tuple[str, ...]:
        """The task's metrics as a run on this data names them (zoo.metrics_file.task_metrics:
        bits per character for character tokens, per token for a tokenizer's)."""
        return task_metrics(self.task, self.tokenizer)


def image_info(x: np.ndarray, y_all: list[np.ndarray]) -> dict[str, Any]:
    return {
        "task": "classification",
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
