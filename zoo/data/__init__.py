"""Datasets as numpy arrays (or image files decoded batch by batch), and the one seeded
batch order both frameworks consume.

Arrays are in the canonical (torch) layout: images (N, C, H, W), sequences (N, T, F),
token ids (N, T). The Keras side moves channels last itself. An image folder's split holds an
:class:`~zoo.data.image_files.ImageFiles` in place of its array: indexing it decodes.

Text splits may carry a padding mask (True = padding, zoo's convention) and token types;
labels that must not count (padding, unmasked positions of masked language modeling) are
``IGNORE_INDEX``, skipped by both frameworks' losses and metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo.data.batches import epoch_batches, epoch_order, steps_per_epoch

if TYPE_CHECKING:
    from zoo.data.image_files import ImageFiles
    from zoo.data.masking import Masking
    from zoo.tokenizer import Tokenizer

__all__ = [
    "IGNORE_INDEX", "Dataset", "Split", "epoch_batches", "epoch_order", "load_dataset", "steps_per_epoch",
]  # fmt: skip

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


class DataError(ValueError):
    """User data that cannot be used, with what was expected instead."""


def load_dataset(
    cfg,
    input_kind: str,
    vocab: str | None = None,
    extend_vocab: bool = False,
    tokenizer: Tokenizer | None = None,
) -> Dataset:
    """``vocab`` or ``tokenizer`` (a checkpoint's) keeps a model's token ids when it meets new
    text, in place of the recipe's ``data.tokenizer``; ``extend_vocab`` appends the characters a
    character vocabulary lacks instead of refusing them."""
    if vocab is not None and tokenizer is None:
        from zoo.tokenizer import CharTokenizer

        tokenizer = CharTokenizer(vocab)
    if cfg.name == "digits":
        from zoo.data.digits import load_digits

        return load_digits(cfg, input_kind)
    if cfg.name == "text":
        from zoo.data.text import load_text

        return load_text(cfg, tokenizer, extend_vocab)
    if cfg.name == "text_classification":
        from zoo.data.text_classification import load_text_classification

        if input_kind == "image":  # a "sequence" family embeds token ids too
            from zoo.registry import families_reading

            raise DataError(
                "data text_classification gives token ids, but the model reads images; use a family "
                f"that reads tokens ({families_reading('tokens', 'sequence')})"
            )
        return load_text_classification(cfg, tokenizer)
    if cfg.name == "npz":
        from zoo.data.npz import load_npz

        return load_npz(cfg, input_kind)
    if cfg.name == "image_folder":
        from zoo.data.image_folder import load_image_folder

        return load_image_folder(cfg, input_kind)
    if cfg.name == "stream":
        from zoo.data.stream import load_stream

        return load_stream(cfg, input_kind, tokenizer)
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
