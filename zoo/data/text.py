"""Text for language models: Python's own documentation, a user's file or folder of .txt files.

The embedded corpus is ``pydoc_data.topics`` (the text behind ``help()``, on every Python
install). The text is tokenized (characters by default, or the recipe's tokenizer), then
split by position (train, then validation, then test) so no sentence leaks between splits,
and packed into blocks without padding: ``seq_len + 1`` tokens for next-token prediction
(inputs the first ``seq_len``, targets the last ``seq_len``), ``seq_len`` for masked language
modeling (masked per batch, :mod:`zoo.data.masking`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from zoo.data.dataset import Dataset, Split
from zoo.data.masking import Masking
from zoo.errors import DataError
from zoo.tokenizer import DEFAULT_SPECIAL_TOKENS, CharTokenizer, Tokenizer, cached_bpe, load_tokenizer

DOCUMENT_SEPARATOR = "\n\n"  # between the files of a folder, and between the embedded topics


def embedded_corpus() -> str:
    from pydoc_data.topics import topics

    return DOCUMENT_SEPARATOR.join(topics[key] for key in sorted(topics))


def read_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error})") from None


def read_text(cfg) -> str:
    """The recipe's text: the embedded docs, a file, or a folder's .txt files (sorted by path,
    searched recursively) joined by a blank line."""
    if cfg.path is None:
        return embedded_corpus()
    if cfg.path.is_dir():
        files = sorted(p for p in cfg.path.rglob("*.txt") if p.is_file())
        if not files:
            raise DataError(f"data.path {str(cfg.path)!r}: a folder without .txt files")
        text = DOCUMENT_SEPARATOR.join(read_file(p) for p in files)
    else:
        text = read_file(cfg.path)
    if not text.strip():
        raise DataError(
            f"data.path {str(cfg.path)!r}: no text (empty, or only whitespace); give UTF-8 text to train on"
        )
    return text


def data_tokenizer(cfg, training_texts: list[str], given: Tokenizer | None, extend: bool) -> Tokenizer:
    """``given`` (a checkpoint's, extended with new characters where asked), else the recipe's:
    'char' learns the characters of ``training_texts``, 'bpe' trains (or reuses) a byte-level
    BPE on them, anything else is a tokenizer path."""
    if given is not None:
        if extend and isinstance(given, CharTokenizer):
            return given.extended("".join(training_texts))
        return given
    if cfg.tokenizer == "char":
        return CharTokenizer.of_text("".join(training_texts))
    if cfg.tokenizer == "bpe":
        return cached_bpe(training_texts, cfg.bpe_vocab_size, DEFAULT_SPECIAL_TOKENS)
    return load_tokenizer(cfg.tokenizer, cfg.lowercase)


def token_ids(tokenizer: Tokenizer, text: str) -> np.ndarray:
    if isinstance(tokenizer, CharTokenizer):
        return tokenizer.encode_array(text)
    return np.asarray(tokenizer.encode(text), dtype=np.int64)


def windows(ids: np.ndarray, seq_len: int) -> Split:
    """Next-token blocks of ``seq_len + 1`` tokens, one token of overlap between blocks."""
    count = (len(ids) - 1) // seq_len
    if count < 1:
        raise DataError(f"a text split of {len(ids)} tokens is shorter than data.seq_len + 1 = {seq_len + 1}")
    starts = np.arange(count) * seq_len
    index = starts[:, None] + np.arange(seq_len + 1)[None, :]
    chunks = ids[index]
    return Split(np.ascontiguousarray(chunks[:, :-1]), np.ascontiguousarray(chunks[:, 1:]))


def blocks(ids: np.ndarray, seq_len: int, masking) -> Split:
    """Masked-LM blocks of ``seq_len`` tokens; ``y`` holds the ids, masked per batch."""
    count = len(ids) // seq_len
    if count < 1:
        raise DataError(f"a text split of {len(ids)} tokens is shorter than data.seq_len = {seq_len}")
    chunks = np.ascontiguousarray(ids[: count * seq_len].reshape(count, seq_len))
    return Split(chunks, chunks, masking=masking)


def load_text(cfg, tokenizer: Tokenizer | None = None, extend: bool = False) -> Dataset:
    """``tokenizer`` (from a checkpoint) fixes the id of every token; by default it is the
    recipe's. ``extend`` appends characters a character vocabulary lacks (fine-tuning on new
    text); other tokenizers encode any text."""
    text = read_text(cfg)
    n_chars_train = len(text) - int(len(text) * cfg.val_fraction) - int(len(text) * cfg.test_fraction)
    # Characters of the whole text (zoo's character LMs always had them all); a BPE is learnt
    # from the training part only.
    learn_from = [text] if cfg.tokenizer == "char" else [text[:n_chars_train]]
    tokenizer = data_tokenizer(cfg, learn_from, tokenizer, extend)
    ids = token_ids(tokenizer, text)
    n_test = int(len(ids) * cfg.test_fraction)
    n_val = int(len(ids) * cfg.val_fraction)
    n_train = len(ids) - n_val - n_test
    parts = ids[:n_train], ids[n_train : n_train + n_val], ids[n_train + n_val :]
    if cfg.task == "masked_language_modeling":
        masking = mlm_masking(tokenizer, cfg.mlm_probability)
        fixed = replace(masking, fixed=True)
        train, val, test = (
            blocks(p, cfg.seq_len, masking if i == 0 else fixed) if len(p) else None
            for i, p in enumerate(parts)
        )
    else:
        train, val, test = (windows(p, cfg.seq_len) if len(p) else None for p in parts)
    if test is None:  # text whose test share is under one token (the training share is larger)
        raise DataError(
            f"data.path {str(cfg.path)!r}: {len(ids)} tokens leave none for testing at data.test_fraction "
            f"{cfg.test_fraction}; give more text or raise data.test_fraction"
        )
    val = val or Split(train.x[:0], train.y[:0], masking=test.masking)
    vocab = tokenizer.vocab if isinstance(tokenizer, CharTokenizer) else None
    info = {"task": cfg.task, "vocab_size": tokenizer.vocab_size}
    return Dataset(train, val, test, cfg.task, info, vocab=vocab, tokenizer=tokenizer)


def mlm_masking(tokenizer: Tokenizer, probability: float):
    if tokenizer.mask_id is None:
        raise DataError(
            "masked language modeling needs a tokenizer with a [MASK] token; "
            f"{tokenizer.source or 'this one'} has none (tokenizer: bpe trains one that has, as "
            "does BERT's vocab.txt)"
        )
    return Masking(probability, tokenizer.mask_id, tokenizer.vocab_size, tuple(sorted(tokenizer.special_ids)))
