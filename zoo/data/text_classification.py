"""Labelled text for sequence classification: a CSV or JSONL file, or the embedded topics.

Rows are read whole and checked with the line that is wrong named. Labels are integers
(used as they are) or names (sorted; the names become the dataset's ``classes``, as an image
folder's class folders do). Each text (or text pair) is tokenized into
``[CLS] a [SEP] (b [SEP])`` where the tokenizer has those tokens, truncated to
``data.max_length`` (longest segment first, counted and reported), and padded to the
longest example of its split: ``Split.mask`` marks the padding (True), ``Split.token_types``
the second segment of pairs.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from zoo.data.dataset import Dataset, Split
from zoo.data.text import data_tokenizer
from zoo.errors import DataError
from zoo.family import MAX_CLASSES
from zoo.limits import parse_json

if TYPE_CHECKING:
    from zoo.tokenizer import Tokenizer

INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class Examples:
    texts: list[str]
    pairs: list[str] | None
    labels: list[int]
    classes: tuple[str, ...]


# ------------------------------------------------------------------------------ reading


def read_rows(path: Path, columns: list[str]) -> list[tuple[int, dict]]:
    """(line number, row) of every record; each must have ``columns``."""
    rows = _csv_rows(path, columns) if path.suffix.lower() == ".csv" else _jsonl_rows(path)
    if not rows:
        raise DataError(f"{path}: has no examples")
    for line, row in rows:
        missing = [c for c in columns if c not in row]
        if missing:
            raise DataError(
                f"{path}, line {line}: no {', '.join(map(repr, missing))} field; it has "
                f"{', '.join(map(repr, row)) or 'none'} (set data.text_column / data.label_column)"
            )
    return rows


def _csv_rows(path: Path, columns: list[str]) -> list[tuple[int, dict]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in columns if c not in header]
            if missing:
                raise DataError(
                    f"{path}: the header row {header} has no column {', '.join(map(repr, missing))}; "
                    "name the columns with data.text_column, data.text_pair_column and data.label_column"
                )
            rows = []
            for row in reader:
                if None in row:  # more cells than the header names
                    raise DataError(
                        f"{path}, line {reader.line_num}: {len(header) + len(row[None])} cells under a "
                        f"header of {len(header)}; quote cells that hold commas"
                    )
                if any(row[c] is None for c in columns):
                    raise DataError(
                        f"{path}, line {reader.line_num}: {sum(v is not None for v in row.values())} cells "
                        f"under a header of {len(header)}"
                    )
                rows.append((reader.line_num, row))
            return rows
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error})") from None
    except csv.Error as error:
        raise DataError(f"{path}: not a readable CSV file ({error})") from None


def _jsonl_rows(path: Path) -> list[tuple[int, dict]]:
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fix = "a .jsonl file holds one JSON object a line"
        rows.append((number, parse_json(line, f"{path}, line {number}", error=DataError, fix=fix)))
    return rows


def file_examples(cfg) -> Examples:
    columns = [c for c in (cfg.text_column, cfg.text_pair_column, cfg.label_column) if c is not None]
    rows = read_rows(cfg.path, columns)
    texts = [_text(cfg.path, line, row, cfg.text_column) for line, row in rows]
    pairs = None
    if cfg.text_pair_column is not None:
        pairs = [_text(cfg.path, line, row, cfg.text_pair_column) for line, row in rows]
    labels, classes = label_ids(cfg.path, [(line, row[cfg.label_column]) for line, row in rows])
    return Examples(texts, pairs, labels, classes)


def _text(path: Path, line: int, row: dict, column: str) -> str:
    value = row[column]
    if not isinstance(value, str):
        raise DataError(f"{path}, line {line}: {column!r} is {value!r}, not text")
    if not value.strip():
        raise DataError(f"{path}, line {line}: {column!r} is empty")
    return value


def label_ids(path: Path, labels: list[tuple[int, object]]) -> tuple[list[int], tuple[str, ...]]:
    """Integer labels as they are; names sorted into ids (and returned as the classes). At least
    two classes, as an image folder needs two class folders; ids below :data:`MAX_CLASSES`."""
    for line, value in labels:
        if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
            raise DataError(f"{path}, line {line}: label {value!r} is neither an integer nor a class name")
    integers = [isinstance(v, int) or bool(INTEGER.fullmatch(v.strip())) for _, v in labels]
    if all(integers):
        ids = [int(v) for _, v in labels]
        for (line, value), i in zip(labels, ids, strict=True):
            if i < 0:
                raise DataError(f"{path}, line {line}: label {value!r} is negative; class ids start at 0")
            if i >= MAX_CLASSES:
                raise DataError(
                    f"{path}, line {line}: label {value!r} is past {MAX_CLASSES - 1:,}, the largest class "
                    f"id a zoo classifier takes (its head would have {i + 1:,} outputs); label K classes "
                    "0..K-1, or use class names"
                )
        _two_classes(path, len(ids), set(ids))
        return ids, ()
    if any(isinstance(v, int) for _, v in labels):
        line, value = next((line, v) for line, v in labels if isinstance(v, int))
        raise DataError(
            f"{path}, line {line}: label {value!r} is a number where other labels are names; use one kind"
        )
    classes = tuple(sorted({v.strip() for _, v in labels}))
    _two_classes(path, len(labels), set(classes))
    lookup = {name: i for i, name in enumerate(classes)}
    return [lookup[v.strip()] for _, v in labels], classes


def _two_classes(path: Path, examples: int, labels: set) -> None:
    if len(labels) < 2:
        raise DataError(
            f"{path}: all {examples} examples have the label {next(iter(labels))!r}; text_classification "
            "needs at least two classes (two or more values in the label column)"
        )


# ------------------------------------------------------------------------------ the embedded set

# Which part of the language reference each pydoc topic belongs to: the label of its paragraphs.
TOPIC_GROUPS: dict[str, tuple[str, ...]] = {
    "simple statements": (
        "assert", "assignment", "augassign", "break", "continue", "del", "global", "import",
        "nonlocal", "pass", "raise", "return", "yield",
    ),
    "compound statements": (
        "async", "class", "compound", "else", "for", "function", "if", "try", "while", "with",
    ),
    "expressions": (
        "atom-identifiers", "atom-literals", "attribute-references", "await", "binary", "bitwise",
        "booleans", "calls", "comparisons", "conversions", "dict", "exprlists", "in", "lambda", "lists",
        "operator-summary", "power", "shifting", "slicings", "subscriptions", "unary",
    ),
    "data model": (
        "attribute-access", "callable-types", "context-managers", "customization", "id-classes",
        "numeric-types", "objects", "sequence-types", "specialattrs", "specialnames", "types",
    ),
    "built-in types": (
        "bltin-code-objects", "bltin-ellipsis-object", "bltin-null-object", "bltin-type-objects",
        "string-methods", "truth", "typesfunctions", "typesmapping", "typesmethods", "typesmodules",
        "typesseq", "typesseq-mutable",
    ),
}  # fmt: skip
MIN_WORDS = 8


def paragraphs(topic: str) -> list[str]:
    """The prose paragraphs of a pydoc topic: no headings, no indented code or grammar."""
    found = []
    for block in topic.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or all(line.startswith("   ") for line in lines):
            continue
        if len(lines) >= 2 and set(lines[-1].strip()) <= set("*=-~^"):
            continue  # a heading and its underline
        text = " ".join(" ".join(lines).split())
        if len(text.split()) >= MIN_WORDS:
            found.append(text)
    return found


def embedded_examples() -> Examples:
    """Paragraphs of Python's own documentation labelled with the part of the language
    reference they come from (five classes, offline, on every Python install)."""
    from pydoc_data.topics import topics

    texts, labels = [], []
    classes = tuple(TOPIC_GROUPS)
    for label, group in enumerate(classes):
        for key in TOPIC_GROUPS[group]:
            for paragraph in paragraphs(topics.get(key, "")):
                texts.append(paragraph)
                labels.append(label)
    return Examples(texts, None, labels, classes)


# ------------------------------------------------------------------------------ encoding


def truncated(first: list[int], second: list[int] | None, budget: int):
    """Shorten the longer segment first (Hugging Face's ``longest_first``) to fit ``budget``."""
    if second is None:
        return first[:budget], None
    a, b = len(first), len(second)
    while a + b > budget:
        if a > b:
            a -= min(a - b, a + b - budget)
        else:
            b -= max(1, min(b - a, a + b - budget))
    return first[:a], second[:b]


def encode_examples(
    tokenizer: Tokenizer, texts: list[str], pairs: list[str] | None, max_length: int
) -> tuple[list[list[int]], list[list[int]], int]:
    """(ids, token types, how many examples were truncated) of every example."""
    firsts = tokenizer.encode_batch(texts)
    seconds = tokenizer.encode_batch(pairs) if pairs is not None else [None] * len(firsts)
    specials = len(tokenizer.encode_for_classification([], [] if pairs is not None else None)[0])
    budget = max_length - specials
    if budget < 1:
        raise DataError(
            f"data.max_length {max_length} leaves no room for text beside {specials} special tokens"
        )
    ids, types, cut = [], [], 0
    for first, second in zip(firsts, seconds, strict=True):
        whole = len(first) + (len(second) if second is not None else 0)
        first, second = truncated(first, second, budget)
        cut += whole > budget
        example, segments = tokenizer.encode_for_classification(first, second)
        ids.append(example)
        types.append(segments)
    return ids, types, cut


def padded(ids: list[list[int]], types: list[list[int]], pad_id: int, pairs: bool, width: int = 0) -> tuple:
    """(x, mask, token_types or None), padded on the right to the longest example (or ``width``)."""
    width = width or max(len(example) for example in ids)
    x = np.full((len(ids), width), pad_id, dtype=np.int64)
    segments = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.ones((len(ids), width), dtype=bool)
    for row, (example, kinds) in enumerate(zip(ids, types, strict=True)):
        x[row, : len(example)] = example
        segments[row, : len(kinds)] = kinds
        mask[row, : len(example)] = False
    return x, mask, (segments if pairs else None)


def split_indices(n: int, val_fraction: float, test_fraction: float, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_test, n_val = max(1, int(n * test_fraction)), int(n * val_fraction)
    if n - n_test - n_val < 1:
        raise DataError(f"{n} examples leave none for training after the validation and test shares")
    test, val, train = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
    return [np.sort(train), np.sort(val), np.sort(test)]


def load_text_classification(cfg, tokenizer: Tokenizer | None = None) -> Dataset:
    """``tokenizer`` (from a checkpoint) replaces the recipe's ``data.tokenizer``."""
    examples = file_examples(cfg) if cfg.path is not None else embedded_examples()
    index = split_indices(len(examples.labels), cfg.val_fraction, cfg.test_fraction, cfg.split_seed)
    train_texts = [examples.texts[i] for i in index[0]]
    if examples.pairs is not None:
        train_texts += [examples.pairs[i] for i in index[0]]
    tokenizer = data_tokenizer(cfg, train_texts, tokenizer, extend=False)
    ids, types, cut = encode_examples(tokenizer, examples.texts, examples.pairs, cfg.max_length)
    labels = np.asarray(examples.labels, dtype=np.int64)
    splits = []
    for part in index:
        if not len(part):
            splits.append(Split(np.zeros((0, 1), np.int64), labels[:0], np.zeros((0, 1), bool)))
            continue
        x, mask, segments = padded(
            [ids[i] for i in part], [types[i] for i in part], tokenizer.padding_id, examples.pairs is not None
        )
        splits.append(Split(x, labels[part], mask, segments))
    notes = ()
    if cut:
        notes = (
            f"{cut} of {len(ids)} examples were longer than data.max_length {cfg.max_length} and truncated",
        )
    num_classes = max(int(labels.max()) + 1, len(examples.classes))
    # "inputs": a family that reads features or tokens (rnn, lstm) takes token ids through its embedding.
    info = {
        "task": "classification",
        "inputs": "tokens",
        "vocab_size": tokenizer.vocab_size,
        "num_classes": num_classes,
    }
    vocab = getattr(tokenizer, "vocab", None)
    return Dataset(
        *splits,
        "classification",
        info,
        vocab=vocab,
        classes=examples.classes,
        tokenizer=tokenizer,
        notes=notes,
    )
