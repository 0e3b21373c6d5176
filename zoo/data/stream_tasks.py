"""What a streaming split's records become, per task: checked once by the index pass, decoded
batch by batch by whichever process or thread asks.

- images: a path (relative to the shard's folder) or the image's bytes, and a label; decoded
  and transformed by :mod:`zoo.data.pixels`, as an image folder's files are;
- text classification: a text (and optionally a second one), and a label; tokenized as
  :mod:`zoo.data.text_classification` does, padded to ``data.max_length``;
- language modeling: a document's text, tokenized on the fly and packed with the others
  into blocks (next-token windows of ``seq_len + 1``, or masked-LM blocks of ``seq_len``).

Every task answers :meth:`check` and :meth:`sizes` (for the index pass: a record is usable,
and how many offsets a batch of them fills), :meth:`span` (the records, or tokens, that a run
of positions covers) and :meth:`decode` (those records as the batch's arrays). Labels are
integers used as they are, or names sorted into ids (the dataset's ``classes``), as for
CSV/JSONL text classification.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo.data.shards import BadRecord, Shard, image_source, parse
from zoo.data.text_classification import INTEGER, encode_examples, padded
from zoo.errors import DataError
from zoo.tokenizer import characters

if TYPE_CHECKING:
    from zoo.data.masking import Masking
    from zoo.data.pixels import Pixels
    from zoo.tokenizer import Tokenizer

BLOCK_SEPARATOR = "\n\n"  # between documents, for a tokenizer without an end-of-text token


def has_columns(shard: Shard, row: int, record: dict, columns: tuple[str, ...]) -> dict:
    missing = [c for c in columns if c not in record]
    if missing:
        raise BadRecord(
            shard,
            row,
            f"no {', '.join(map(repr, missing))} field; it has {', '.join(map(repr, record)) or 'none'}",
        )
    return record


class Unit:
    """One record on its way through an epoch: where it is stored, its size in the epoch's
    offsets (1, or its tokens), and where it starts; its tokens once a reader needed them."""

    __slots__ = ("row", "shard", "size", "start", "stored", "tokens")

    def __init__(self, shard: Shard, row: int, stored: Any, size: int):
        self.shard, self.row, self.stored, self.size = shard, row, stored, size
        self.start = 0
        self.tokens: np.ndarray | None = None

    def record(self) -> dict:
        return parse(self.shard, self.row, self.stored)


# ------------------------------------------------------------------------------ labels


@dataclass
class Labels:
    """The labels the index pass saw; at the end, integers or sorted names."""

    column: str
    largest: int = -1  # integer labels: only the largest matters (the class count)
    names: set[str] = field(default_factory=set)
    first: dict[str, str] = field(default_factory=dict)  # kind -> where it was first seen

    def check(self, shard: Shard, row: int, value: Any) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, str | int)
            or (isinstance(value, str) and not value.strip())
        ):
            raise BadRecord(shard, row, f"label {value!r} is neither an integer nor a class name")
        if isinstance(value, int) or INTEGER.fullmatch(value.strip()):
            number = int(value)
            if number < 0:
                raise BadRecord(shard, row, f"label {value!r} is negative; class ids start at 0")
            self.largest = max(self.largest, number)
            self.first.setdefault("integer", f"{shard.where(row)} ({value!r})")
        else:
            self.names.add(value.strip())
            self.first.setdefault("name", f"{shard.where(row)} ({value!r})")

    def found(self) -> dict[str, Any]:
        if self.largest >= 0 and self.names:
            raise DataError(
                f"labels mix numbers ({self.first['integer']}) and class names ({self.first['name']}); "
                "use one kind"
            )
        return {"names": sorted(self.names), "largest": self.largest}


def label_lookup(found: dict[str, Any]) -> dict[str, int] | None:
    return {name: i for i, name in enumerate(found["names"])} if found["names"] else None


def label_ids(labels: list[Any], lookup: dict[str, int] | None) -> np.ndarray:
    if lookup is None:
        return np.asarray([int(v) for v in labels], dtype=np.int64)
    return np.asarray([lookup[v.strip()] for v in labels], dtype=np.int64)


class Labelled:
    """A classification task: one record is one example, its label checked by :class:`Labels`."""

    labels: Labels | None  # the index pass's
    lookup: dict[str, int] | None  # label names -> ids, once the index pass is done

    def found(self) -> dict[str, Any]:
        return self.labels.found()

    def sizes(self, shard: Shard, checked: list) -> np.ndarray:
        return np.ones(len(checked), dtype=np.int64)

    def span(self, positions: np.ndarray) -> tuple[int, int]:
        return int(positions[0]), int(positions[-1]) + 1


# ------------------------------------------------------------------------------ images


@dataclass
class ImageExamples(Labelled):
    image_column: str
    label_column: str
    pixels: Pixels
    decode_check: bool = False  # data.check_images: decode every image once (slow)
    lookup: dict[str, int] | None = None
    labels: Labels | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.image_column, self.label_column)

    def key(self) -> str:
        return f"images:{self.decode_check}"

    def check(self, shard: Shard, row: int, record: dict) -> None:
        from zoo.data.image_folder import problem

        has_columns(shard, row, record, self.columns)
        self.labels.check(shard, row, record[self.label_column])
        source = image_source(shard, row, record[self.image_column])
        trouble = problem(source, self.decode_check)
        if trouble is not None:
            raise BadRecord(shard, row, f"not a readable image ({trouble})")

    def outputs(self, channels_last: bool) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
        """(name, dtype, shape of one example) of each array :meth:`decode` returns."""
        size, channels = self.pixels.image_size, self.pixels.channels
        shape = (size, size, channels) if channels_last else (channels, size, size)
        return [("x", np.dtype(np.float32), shape), ("y", np.dtype(np.int64), ())]

    def decode(
        self, units: list[Unit], positions: np.ndarray, seed: int, epoch: int | None, channels_last: bool
    ):
        from zoo.data import pixels as px

        pixels = self.pixels
        key = px.epoch_key(seed, epoch) if epoch is not None and pixels.augmentation is not None else None
        crops, labels = [], []
        for unit, position in zip(units, positions.tolist(), strict=True):
            record = unit.record()
            try:
                image = px.open_image(
                    image_source(unit.shard, unit.row, record[self.image_column]), pixels.mode
                )
            except px.BadImageError as error:
                raise DataError(f"{unit.shard.where(unit.row)}: {str(error).split(': ', 1)[-1]}") from None
            if key is None:
                crops.append(px.center(image, pixels))
            else:
                crops.append(px.augmented(image, pixels, px.sample_rng(key, position)))
            labels.append(record[self.label_column])
        stacked = np.stack(crops)
        if not channels_last:
            stacked = np.ascontiguousarray(stacked.transpose(0, 3, 1, 2))
        return px.normalize(stacked, pixels, channels_last), label_ids(labels, self.lookup)


# ------------------------------------------------------------------------------ text classification


@dataclass
class TextExamples(Labelled):
    text_column: str
    pair_column: str | None
    label_column: str
    max_length: int
    tokenizer: Tokenizer | None = None  # known once the index pass is done
    lookup: dict[str, int] | None = None
    labels: Labels | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.text_column, self.pair_column, self.label_column) if c is not None)

    def key(self) -> str:
        return "text"

    def check(self, shard: Shard, row: int, record: dict) -> None:
        has_columns(shard, row, record, self.columns)
        for column in (self.text_column, self.pair_column):
            if column is not None:
                checked_text(shard, row, record, column)
        self.labels.check(shard, row, record[self.label_column])

    def outputs(self, channels_last: bool) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
        """The arrays :meth:`decode` returns that are not None, by the twins' argument names."""
        ids, width = np.dtype(np.int64), (self.max_length,)
        types = [("token_type_ids", ids, width)] if self.pair_column else []
        return [("ids", ids, width), ("padding_mask", np.dtype(bool), width), *types, ("y", ids, ())]

    def decode(
        self, units: list[Unit], positions: np.ndarray, seed: int, epoch: int | None, channels_last: bool
    ):
        records = [u.record() for u in units]
        texts = [r[self.text_column] for r in records]
        pairs = [r[self.pair_column] for r in records] if self.pair_column else None
        ids, types, _ = encode_examples(self.tokenizer, texts, pairs, self.max_length)
        x, mask, segments = padded(ids, types, self.tokenizer.padding_id, pairs is not None, self.max_length)
        return x, mask, segments, label_ids([r[self.label_column] for r in records], self.lookup)


def checked_text(shard: Shard, row: int, record: dict, column: str) -> str:
    value = text_value(shard, row, record, column)
    if not value.strip():
        raise BadRecord(shard, row, f"{column!r} is empty")
    return value


def text_value(shard: Shard, row: int, record: dict, column: str) -> str:
    """A record's text, refused when it is none, or holds a lone surrogate (JSON can spell
    one, ``"\\ud800"``; no tokenizer takes it)."""
    value = record[column]
    if not isinstance(value, str):
        raise BadRecord(shard, row, f"{column!r} is {value!r}, not text")
    where = lone_surrogate(value)
    if where is not None:
        raise BadRecord(shard, row, f"{column!r} holds {value[where]!r}, a lone surrogate, not a character")
    return value


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (which UTF-8 cannot encode), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


# ------------------------------------------------------------------------------ language modeling


@dataclass
class TokenExamples:
    """Documents tokenized on the fly and packed without padding: the epoch's token stream is
    its documents in the epoch's order, each followed by a separator (text files: each line as
    it is, its newline included); block ``p`` is tokens ``[p * seq_len, p * seq_len + width)``."""

    text_column: str
    seq_len: int
    tokenizer: Tokenizer | None  # None: characters, whose vocabulary the index pass collects
    masking: Masking | None = None  # masked language modeling
    characters: set[str] = field(default_factory=set)

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.text_column,)

    @property
    def width(self) -> int:
        """Tokens a block reads: the next-token window's one more than it feeds the model."""
        return self.seq_len if self.masking is not None else self.seq_len + 1

    def key(self) -> str:
        return "char" if self.tokenizer is None else f"tokens:{self.tokenizer.fingerprint()}"

    def check(self, shard: Shard, row: int, record: dict) -> str:
        return text_value(shard, row, has_columns(shard, row, record, self.columns), self.text_column)

    def check_column(self, batch) -> Any:
        """A Parquet or Arrow batch's texts, as the Arrow array they are, when every row holds
        one (None otherwise: its rows are checked one by one, to name the bad ones)."""
        import pyarrow as pa

        texts = batch.column(self.text_column)
        kind = texts.type
        return (
            texts
            if not texts.null_count and (pa.types.is_string(kind) or pa.types.is_large_string(kind))
            else None
        )

    def sizes(self, shard: Shard, texts: Any) -> np.ndarray:
        """Each document's tokens in the epoch's stream, its separator included: as many as
        :func:`document_ids` gives (``decode`` checks), counted a batch at a time. ``texts``: a
        list, or an Arrow array of them (characters counted in Arrow, no string made a row)."""
        tail = 0 if shard.kind == "text" else len(BLOCK_SEPARATOR)
        if self.tokenizer is not None:
            listed = texts if isinstance(texts, list) else texts.to_pylist()
            return self.tokenizer.counts(listed) + (tail and len(separator(self.tokenizer)))
        if isinstance(texts, list):
            self.characters |= characters(texts)
            return np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + tail
        import pyarrow as pa
        import pyarrow.compute as pc

        whole = pc.binary_join(pa.ListArray.from_arrays([0, len(texts)], texts), "")[0].as_py()
        self.characters |= characters([whole])
        return pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64) + tail

    def found(self) -> dict[str, Any]:
        return {"characters": "".join(sorted(self.characters | set(BLOCK_SEPARATOR)))}

    def blocks(self, tokens: int) -> int:
        """Blocks of an epoch of ``tokens`` tokens (the last, incomplete one left out)."""
        return max(0, (tokens - self.width) // self.seq_len + 1) if tokens >= self.width else 0

    def span(self, positions: np.ndarray) -> tuple[int, int]:
        return int(positions[0]) * self.seq_len, int(positions[-1]) * self.seq_len + self.width

    def outputs(self, channels_last: bool) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
        ids = np.dtype(np.int64)
        return [("x", ids, (self.seq_len,)), ("y", ids, (self.seq_len,))]

    def decode(
        self, units: list[Unit], positions: np.ndarray, seed: int, epoch: int | None, channels_last: bool
    ):
        start, stop = self.span(positions)
        pieces = []
        for unit in units:
            if unit.tokens is None:
                unit.tokens = document_ids(self.tokenizer, unit.record()[self.text_column], unit.shard.kind)
                if len(unit.tokens) != unit.size:
                    raise DataError(
                        f"{unit.shard.where(unit.row)}: {len(unit.tokens)} tokens, the index says "
                        f"{unit.size}; has the file changed since it was indexed?"
                    )
            pieces.append(unit.tokens[max(0, start - unit.start) : stop - unit.start])
        tokens = np.concatenate(pieces)
        starts = (positions - positions[0]) * self.seq_len
        chunk = tokens[starts[:, None] + np.arange(self.width)[None, :]]
        if self.masking is not None:
            return self.masking.apply(chunk, positions, seed, -1 if epoch is None else epoch)
        return np.ascontiguousarray(chunk[:, :-1]), np.ascontiguousarray(chunk[:, 1:])


def separator(tokenizer: Tokenizer) -> list[int]:
    """What follows each document: end-of-text, else [SEP], else the ids of a blank line."""
    for token in (tokenizer.eos_id, tokenizer.sep_id):
        if token is not None:
            return [token]
    return tokenizer.encode(BLOCK_SEPARATOR)


def document_ids(tokenizer: Tokenizer, text: str, kind: str) -> np.ndarray:
    ids = tokenizer.encode(text)
    if kind != "text":
        ids = ids + separator(tokenizer)
    return np.asarray(ids, dtype=np.int64)
