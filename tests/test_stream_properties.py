"""Streamed corpora as users have them, generated: every document's tokens arrive exactly once an
epoch, in the one seeded order, read the same by a torch DataLoader (worker processes, after the
parent read a first batch as the memory estimate does) and by tf.data (parallel calls), and a
resume from any batch continues bit-exactly.

A corpus is a few shards of any format zoo streams (JSONL, CSV, text, Parquet, Arrow), empty
ones included, of random documents: empty to a few thousand characters, duplicated, any Unicode
(astral, combining, U+2028, a BOM mid-text), CRLF and lone CRs, JSON escaped or not, JSONL blank
lines, a BOM at a file's start, and with ``data.on_bad_record: skip`` bad rows among them. What a
language model must read is built here from the documents, not from zoo's index: the epoch's
documents in the order :func:`zoo.data.stream_order.epoch_ids` defines, each followed by its
separator (a text file's record is its line, newline included), packed into blocks.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zoo.data import DataError, load_dataset
from zoo.data.stream_order import epoch_ids
from zoo.data.stream_tasks import BLOCK_SEPARATOR
from zoo.recipe import StreamData

KINDS = ("jsonl", "csv", "txt", "parquet", "arrow")
# Characters documents are made of: ASCII with CSV's and JSON's special ones, line breaks of
# every kind, Latin, CJK, an emoji (astral), a combining accent, a NUL, a BOM.
PIECES = [
    *"abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789", ",", '"', "'", "\\", "\t", "{", "}", ":",
    "\n", "\r\n", "\r", "\u2028", "\x85", "é", "ß", "中文", "😀", "e\u0301", "\x00", "\ufeff",
]  # fmt: skip
SEQ_LEN, BATCH = 16, 32


@dataclass
class ShardSpec:
    kind: str
    lengths: list[int]  # characters of each document
    seed: int  # of the documents' characters
    copies: list[int] = field(default_factory=list)  # document i repeats document copies[i] (-1: its own)
    crlf: bool = False  # line endings
    blank_lines: bool = False  # JSONL: whitespace-only lines between records
    bom: bool = False  # a UTF-8 byte-order mark before the first line (JSONL, CSV, text)
    ascii_json: bool = True  # JSONL: json.dumps' ensure_ascii
    bad: list[int] = field(default_factory=list)  # rows (before document i) that are no record
    group: int = 3  # Parquet rows a row group


@dataclass
class CorpusSpec:
    shards: list[ShardSpec]
    buffer: int
    seed: int
    epoch: int
    resume_at: int  # the batch a resumed read starts from (modulo the epoch's batches)


def documents(spec: ShardSpec) -> list[str]:
    rng = np.random.default_rng(spec.seed)
    docs: list[str] = []
    for i, length in enumerate(spec.lengths):
        copy = spec.copies[i] if i < len(spec.copies) else -1
        if 0 <= copy < i:
            docs.append(docs[copy])
            continue
        text = "".join(PIECES[j] for j in rng.integers(0, len(PIECES), length))
        if spec.kind == "txt":  # a record a line: a document holds no line feed of its own
            text = text.replace("\n", " ").replace("\x85", " ").replace("\u2028", " ")
        docs.append(text)
    return docs


def write_shard(path: Path, spec: ShardSpec) -> list[str]:
    """Write the shard; return the text of each usable record in file order, as a language
    model reads it (a text file's line with its line ending)."""
    docs = documents(spec)
    bad = set(spec.bad)
    ending = "\r\n" if spec.crlf else "\n"
    if spec.kind == "jsonl":
        lines = []
        for i, doc in enumerate(docs):
            if i in bad:
                lines.append(["not json", '{"words": "no text field"}', '{"text": 5}', '"\\ud800"'][i % 4])
            if spec.blank_lines and i % 3 == 1:
                lines.append(" \t")
            lines.append(json.dumps({"text": doc, "n": i}, ensure_ascii=spec.ascii_json))
        body = "".join(line + ending for line in lines).encode()
        path.write_bytes((b"\xef\xbb\xbf" if spec.bom else b"") + body)
        return [doc + BLOCK_SEPARATOR for doc in docs]
    if spec.kind == "csv":
        with open(path, "w", newline="", encoding="utf-8-sig" if spec.bom else "utf-8") as handle:
            quoting = csv.QUOTE_MINIMAL if spec.crlf else csv.QUOTE_ALL  # minimal quotes CR and LF in "\r\n"
            writer = csv.writer(handle, lineterminator=ending, quoting=quoting)
            writer.writerow(["text", "n"])
            for i, doc in enumerate(docs):
                if i in bad:
                    writer.writerow(["three", "cells", "here"])
                writer.writerow([doc, i])
        return [doc + BLOCK_SEPARATOR for doc in docs]
    if spec.kind == "txt":
        records, raw = [], b"\xef\xbb\xbf" if spec.bom else b""
        for i, doc in enumerate(docs):
            if i in bad:
                raw += b"not UTF-8 \xff\xfe" + ending.encode()
            last = i == len(docs) - 1
            line = doc if last and i % 2 else doc + ending  # the last line without its ending, at times
            record = line[1:] if not raw and line.startswith("\ufeff") else line  # a BOM is no text
            raw += line.encode()
            if record:
                records.append(record)
        path.write_bytes(raw)
        return records
    import pyarrow as pa

    texts: list[str | None] = []
    for i, doc in enumerate(docs):
        if i in bad:
            texts.append(None)
        texts.append(doc)
    table = pa.table({"text": pa.array(texts, pa.string())})
    if spec.kind == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path, row_group_size=spec.group)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=spec.group):
                writer.write_batch(batch)
    return [doc + BLOCK_SEPARATOR for doc in docs]


@st.composite
def shard_specs(draw, bad_rows: bool) -> ShardSpec:
    kind = draw(st.sampled_from(KINDS))
    count = draw(st.integers(0, 24))
    lengths = draw(
        st.lists(st.sampled_from([0, 1, 2, 5, 40, 300, 1200, 3000]), min_size=count, max_size=count)
    )
    copies = draw(st.lists(st.integers(-1, max(0, count - 1)), min_size=count, max_size=count))
    bad = draw(st.lists(st.integers(0, max(0, count - 1)), max_size=3)) if bad_rows and count else []
    return ShardSpec(
        kind, lengths, draw(st.integers(0, 2**16)), copies, draw(st.booleans()), draw(st.booleans()),
        draw(st.booleans()), draw(st.booleans()), sorted(set(bad)), draw(st.integers(1, 7)),
    )  # fmt: skip


@st.composite
def corpora(draw) -> CorpusSpec:
    bad_rows = draw(st.booleans())
    shards = draw(st.lists(shard_specs(bad_rows), min_size=1, max_size=4))
    return CorpusSpec(
        shards, draw(st.sampled_from([0, 1, 5, 40])), draw(st.integers(0, 3)), draw(st.integers(0, 1)),
        draw(st.integers(0, 10**6)),
    )  # fmt: skip


# The corpus, small: one JSONL file of long documents (far more than a read buffer),
# whose first batch the parent process reads before its DataLoader workers fork.
ONE_FILE = CorpusSpec([ShardSpec("jsonl", [3000] * 24, seed=1)], buffer=5, seed=0, epoch=0, resume_at=7)
MIXED = CorpusSpec(
    [
        ShardSpec("jsonl", [300] * 20, 2, crlf=True, blank_lines=True, bom=True, bad=[3]),
        ShardSpec("csv", [1200] * 8, 3, crlf=True, bom=True, bad=[0]),
        ShardSpec("txt", [], 4),
        ShardSpec("parquet", [40, 0, 3000, 5] * 3, 5, copies=[-1, -1, -1, -1, 0, 1, 2, 3], bad=[2]),
        ShardSpec("txt", [300] * 12, 6, crlf=True, bom=True, bad=[5]),
    ],
    buffer=5, seed=2, epoch=1, resume_at=3,
)  # fmt: skip


def expected_ids(tokenizer, texts: list[list[str]], spec: CorpusSpec) -> np.ndarray:
    """The epoch's token stream: the records in the documented order, each its tokens."""
    flat = [text for shard in texts for text in shard]
    order = epoch_ids([len(shard) for shard in texts], spec.seed, spec.epoch, spec.buffer)
    ordered = [flat[i] for i in order]
    assert sorted(ordered) == sorted(flat)  # every record once
    return tokenizer.encode_array("".join(ordered))


def blocks_of(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    count = (len(ids) - SEQ_LEN - 1) // SEQ_LEN + 1 if len(ids) > SEQ_LEN else 0
    starts = np.arange(count)[:, None] * SEQ_LEN + np.arange(SEQ_LEN + 1)[None, :]
    chunk = ids[starts] if count else np.zeros((0, SEQ_LEN + 1), np.int64)
    return chunk[:, :-1], chunk[:, 1:]


def torch_batches(split, spec: CorpusSpec, skip: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    from zoo.lightning.data import loader

    # What a run's memory estimate does before training: read the first batch in this process.
    split.x.batch(np.arange(min(BATCH, len(split))), spec.seed, spec.epoch)
    batches = loader(split, BATCH, spec.seed, shuffle=True)
    batches.sampler.set_epoch(spec.epoch)
    batches.sampler.skip = skip
    return [(x.numpy(), y.numpy()) for x, y in batches]


def keras_batches(split, spec: CorpusSpec, skip: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    from zoo.keras.data import train_dataset

    data = train_dataset(
        split, BATCH, spec.seed, True, spec.epoch + 1, "tokens", start_epoch=spec.epoch, skip=skip
    )
    return list(data.as_numpy_iterator())


def same(batches: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray, y: np.ndarray, first: int = 0) -> None:
    assert len(batches) == -(-len(x) // BATCH) - first
    for b, (bx, by) in enumerate(batches, start=first):
        assert np.array_equal(bx, x[b * BATCH : (b + 1) * BATCH]), f"batch {b} inputs"
        assert np.array_equal(by, y[b * BATCH : (b + 1) * BATCH]), f"batch {b} targets"


def check_corpus(spec: CorpusSpec) -> None:
    with (
        tempfile.TemporaryDirectory() as folder,
        mock.patch.dict(os.environ, {"ZOO_CACHE": f"{folder}/cache"}),
    ):
        root = Path(folder)
        (root / "c").mkdir()
        texts = [write_shard(root / "c" / f"part-{i:03d}.{s.kind}", s) for i, s in enumerate(spec.shards)]
        (root / "test.jsonl").write_text(
            "".join(json.dumps({"text": "held out " * 4}) + "\n" for _ in range(3))
        )
        skip = any(s.bad for s in spec.shards)
        cfg = StreamData(
            path=str(root / "c"), test=str(root / "test.jsonl"), tokenizer="char", seq_len=SEQ_LEN,
            shuffle_buffer=spec.buffer, val_fraction=0, workers=2, on_bad_record="skip" if skip else "error",
        )  # fmt: skip
        if sum(len(text) for shard in texts for text in shard) <= SEQ_LEN:  # characters: not one block
            with pytest.raises(DataError, match="the train split has no examples"):
                load_dataset(cfg, "tokens")
            return
        data = load_dataset(cfg, "tokens")
        x, y = blocks_of(expected_ids(data.tokenizer, texts, spec))
        assert [p.index.records for p in data.train.x.parts] == [len(t) for t in texts]
        assert len(data.train) == len(x)
        same(torch_batches(data.train, spec), x, y)
        same(keras_batches(data.train, spec), x, y)
        # A resumed run: a new process (a fresh load), reading on from a batch of the epoch.
        resumed = load_dataset(cfg, "tokens").train
        first = spec.resume_at % -(-len(x) // BATCH)
        same(torch_batches(resumed, spec, skip=first), x, y, first)
        same(keras_batches(resumed, spec, skip=first), x, y, first)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(ONE_FILE)
@example(MIXED)
@given(corpora())
def test_every_documents_tokens_arrive_once_in_one_order_in_both_frameworks_and_on_resume(spec):
    check_corpus(spec)
