"""Character-level text for language models: Python's own documentation, or a user's file.

The embedded corpus is ``pydoc_data.topics`` (the text behind ``help()``, on every Python
install). The text is split by position (train, then validation, then test) so no
sentence leaks between splits, and cut into windows of ``seq_len + 1`` characters:
inputs are the first ``seq_len``, targets the last ``seq_len``.
"""

from __future__ import annotations

import numpy as np

from zoo.data import DataError, Dataset, Split


def embedded_corpus() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def read_text(cfg) -> str:
    if cfg.path is None:
        return embedded_corpus()
    try:
        return cfg.path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{cfg.path}: not UTF-8 text ({error})") from None


def windows(ids: np.ndarray, seq_len: int) -> Split:
    count = (len(ids) - 1) // seq_len
    if count < 1:
        raise DataError(
            f"a text split of {len(ids)} characters is shorter than data.seq_len + 1 = {seq_len + 1}"
        )
    starts = np.arange(count) * seq_len
    index = starts[:, None] + np.arange(seq_len + 1)[None, :]
    chunks = ids[index]
    return Split(np.ascontiguousarray(chunks[:, :-1]), np.ascontiguousarray(chunks[:, 1:]))


def load_text(cfg, vocab: str | None = None, extend: bool = False) -> Dataset:
    """``vocab`` (from a checkpoint) fixes the id of every character; by default it is the
    text's own. ``extend`` appends characters the vocabulary lacks (fine-tuning on new text)."""
    text = read_text(cfg)
    vocab = vocab or "".join(sorted(set(text)))
    if extend:
        vocab += "".join(sorted(set(text) - set(vocab)))
    lookup = {c: i for i, c in enumerate(vocab)}
    unknown = sorted(set(text) - set(lookup))
    if unknown:
        raise DataError(f"the text has characters outside the vocabulary: {''.join(unknown)[:40]!r}")
    ids = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    n_test = int(len(ids) * cfg.test_fraction)
    n_val = int(len(ids) * cfg.val_fraction)
    n_train = len(ids) - n_val - n_test
    train = windows(ids[:n_train], cfg.seq_len)
    val = windows(ids[n_train : n_train + n_val], cfg.seq_len) if n_val else Split(train.x[:0], train.y[:0])
    test = windows(ids[n_train + n_val :], cfg.seq_len)
    info = {"task": "language_modeling", "vocab_size": len(vocab)}
    return Dataset(train, val, test, "language_modeling", info, vocab=vocab)
