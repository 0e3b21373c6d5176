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

from zoo.data.batches import epoch_batches, epoch_order, steps_per_epoch
from zoo.data.dataset import IGNORE_INDEX, Dataset, Split
from zoo.data.digits import load_digits
from zoo.data.npz import load_npz
from zoo.data.stream_loading import load_stream
from zoo.data.text import load_text
from zoo.data.text_classification import load_text_classification
from zoo.errors import DataError
from zoo.registry import families_reading
from zoo.tokenizer import CharTokenizer, Tokenizer

__all__ = [
    "IGNORE_INDEX", "DataError", "Dataset", "Split", "epoch_batches", "epoch_order", "load_dataset",
    "steps_per_epoch",
]  # fmt: skip


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
        tokenizer = CharTokenizer(vocab)
    if cfg.name == "digits":
        return load_digits(cfg, input_kind)
    if cfg.name == "text":
        return load_text(cfg, tokenizer, extend_vocab)
    if cfg.name == "text_classification":
        if input_kind == "image":  # a "sequence" family embeds token ids too
            raise DataError(
                "data text_classification gives token ids, but the model reads images; use a family "
                f"that reads tokens ({families_reading('tokens', 'sequence')})"
            )
        return load_text_classification(cfg, tokenizer)
    if cfg.name == "npz":
        return load_npz(cfg, input_kind)
    if cfg.name == "image_folder":
        from zoo.data.image_folder import load_image_folder

        return load_image_folder(cfg, input_kind)
    if cfg.name == "stream":
        return load_stream(cfg, input_kind, tokenizer)
    raise DataError(f"data.name {cfg.name!r} has no loader")
