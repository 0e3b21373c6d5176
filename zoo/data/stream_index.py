"""A streaming corpus read once before training: which rows are records, and how big each is.

The order of an epoch (:mod:`zoo.data.stream_order`) needs the number of records of every
shard, and a language model's epoch (blocks of tokens) needs the token count of every record:
one pass over the files finds them, parsing and checking every row, and sizing the records a
batch at a time (a tokenizer encodes a batch on every core). A row that is not a usable
record stops the pass with its file and row named (``data.on_bad_record: error``), or is left
out of every epoch and counted (``skip``). The counts are written to ``$ZOO_CACHE/streams``
(default ``~/.cache/zoo``) as they come, a file a shard, and read back a chunk at a time: the
pass and the readers hold a few chunks, never a corpus' worth, and the next run over the same
files (same sizes and modification times) and settings reads the index instead of the corpus.

Every reader checks a shard against the size and modification time it was indexed with when it
opens it: a file changed, deleted or moved since (or while it was indexed) is named, as a
:class:`ShardChanged`, rather than read against an index that no longer describes it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shutil
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from zoo.cache_dir import cache_dir
from zoo.data.shards import (
    LINE_KINDS,
    TABLE_KINDS,
    BadRecord,
    BadShard,
    Shard,
    batch_rows,
    parse,
    raw_batches,
    raw_rows,
)
from zoo.errors import DataError
from zoo.limits import read_json
from zoo.tokenizer import write_atomically

log = logging.getLogger("zoo")
INDEX_VERSION = 1  # part of every cache key: a new layout never reads an old index
FLUSH = 1 << 16  # record sizes written to disk at once
BATCH_ROWS = 1024  # records sized at once ...
BATCH_CHARACTERS = 1 << 20  # ... or fewer, when their texts reach this many characters
SHOWN = 3  # bad records named in the log when they are skipped


class Survey(Protocol):
    """What the index pass asks of a task: the columns it reads, whether a record is usable,
    and the sizes of a batch of usable records."""

    columns: tuple[str, ...]

    def check(self, shard: Shard, row: int, record: dict) -> Any:
        """What :meth:`sizes` needs of the record (its text, or None); :class:`BadRecord`
        when the task cannot use it."""
        ...

    def sizes(self, shard: Shard, checked: Any) -> np.ndarray:
        """The sizes (int64) of records :meth:`check` passed, from what it returned (a list),
        or of a batch ``check_column`` passed whole, from what that returned."""
        ...

    # Optional: check_column(batch) -> Any | None, a Parquet or Arrow RecordBatch checked whole
    # (None: checked row by row, so that a bad row is named).

    def key(self) -> str:
        """What else decides the sizes (a tokenizer's fingerprint), for the cache key."""
        ...

    def found(self) -> dict[str, Any]:
        """What the pass learnt besides the sizes (label names, characters): JSON."""
        ...


class ShardChanged(DataError):
    """A shard that is no longer the file its index describes: changed, deleted or moved."""


def stamp(shard: Shard) -> tuple[int, int]:
    """(size, modification time in ns): what says a file is the one that was indexed."""
    try:
        found = os.stat(shard.path)
    except OSError as error:
        raise ShardChanged(
            f"{shard.path} cannot be read ({error.strerror}): was it deleted or moved? Put it back, "
            "or remove it from data.path"
        ) from None
    return found.st_size, found.st_mtime_ns


def check_unchanged(shard: Shard, indexed: tuple[int, int], when: str = "since it was indexed") -> None:
    """Raise :class:`ShardChanged` unless the file is still the size and age it was indexed at."""
    now = stamp(shard)
    if now != indexed:
        what = f"{indexed[0]:,} bytes then, {now[0]:,} now" if now[0] != indexed[0] else "written to since"
        raise ShardChanged(
            f"{shard.path} has changed {when} ({what}); a stream reads a file as it was indexed. "
            "Train again (or zoo resume the run) to index it as it is now"
        )


@dataclass(frozen=True)
class ShardIndex:
    shard: Shard
    records: int  # usable records
    bad: np.ndarray  # rows (as raw_rows numbers them) left out, ascending
    sizes_file: Path | None  # each record's size, int64; None: every record is one example
    stamp: tuple[int, int] = (-1, -1)  # the file's (size, mtime ns) as indexed; (-1, -1): unchecked

    def sizes(self, start: int, stop: int) -> Iterator[int]:
        """The sizes of records ``start`` .. ``stop - 1``, read a chunk at a time."""
        if self.sizes_file is None:
            yield from itertools.repeat(1, max(0, stop - start))
            return
        try:
            handle = open(self.sizes_file, "rb")  # noqa: SIM115 (closed below, read lazily)
        except OSError as error:
            raise DataError(
                f"{self.sizes_file}: the index of {self.shard.path} cannot be read ({error.strerror}); "
                "was the cache deleted? Train again (or zoo resume the run) to index the files again"
            ) from None
        with handle:
            handle.seek(start * 8)
            while start < stop:
                chunk = np.fromfile(handle, dtype=np.int64, count=min(stop - start, FLUSH))
                if not len(chunk):
                    raise DataError(f"{self.sizes_file}: cut short; delete it to index the files again")
                yield from chunk.tolist()
                start += len(chunk)

    def total(self, start: int, stop: int) -> int:
        """Offsets records ``start`` .. ``stop - 1`` fill in an epoch (records, or tokens)."""
        if self.sizes_file is None:
            return max(0, stop - start)
        return sum(self.sizes(start, stop))


@dataclass(frozen=True)
class CorpusIndex:
    shards: tuple[ShardIndex, ...]
    found: dict[str, Any]  # the survey's findings
    skipped: int  # bad rows (and unreadable shards' files) left out


def corpus_index(shards: Sequence[Shard], survey: Survey, on_bad: str, sized: bool) -> CorpusIndex:
    """The index of ``shards``: from the cache when these files were indexed with these settings,
    else read now (and cached). ``sized``: keep each record's size (token counts)."""
    stamps = [stamp(shard) for shard in shards]
    folder = cache_folder(shards, survey, sized, stamps)
    cached = folder / "index.json"
    if cached.is_file():
        record = read_json(cached, error=DataError, fix=f"delete {folder} to index the files again")
        index = _load(folder, shards, record, stamps)
    else:
        index = _build(folder, shards, survey, on_bad, sized, stamps)
        for shard, indexed in zip(shards, stamps, strict=True):  # written to while it was read?
            check_unchanged(shard, indexed, when="while it was indexed")
    if index.skipped:
        _refuse_or_report(index, folder, on_bad)
    return index


def cache_folder(
    shards: Sequence[Shard], survey: Survey, sized: bool, stamps: Sequence[tuple[int, int]] | None = None
) -> Path:
    """Where the index of these files, as they are now (``stamps``), for this survey lives."""
    files = []
    for shard, (size, mtime) in zip(shards, stamps or [stamp(s) for s in shards], strict=True):
        files.append([os.path.abspath(shard.path), shard.kind, size, mtime])
    described = json.dumps([INDEX_VERSION, files, list(survey.columns), survey.key(), sized])
    digest = hashlib.sha256(described.encode()).hexdigest()[:24]
    return cache_dir("streams") / digest


def _build(
    folder: Path,
    shards: Sequence[Shard],
    survey: Survey,
    on_bad: str,
    sized: bool,
    stamps: Sequence[tuple[int, int]],
) -> CorpusIndex:
    """Read every shard once; written into a temporary folder renamed into place (two
    data-parallel processes may index the same files at once: either result is the same)."""
    temporary = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    try:
        entries, problems = [], []
        for i, shard in enumerate(shards):
            entries.append(_index_shard(i, shard, survey, on_bad, temporary, sized, problems))
        record = {"shards": entries, "found": survey.found(), "problems": problems, "sized": sized}
        write_atomically(temporary / "index.json", json.dumps(record))
        try:
            os.replace(temporary, folder)
        except OSError:  # another process put the same index there first
            shutil.rmtree(temporary, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return _load(folder, shards, record, stamps)


def _index_shard(
    i: int, shard: Shard, survey: Survey, on_bad: str, folder: Path, sized: bool, problems: list[str]
) -> dict:
    bad, records = array("q"), 0
    try:
        with open(folder / f"sizes-{i}.bin", "wb") as out:
            for checked in _checked_batches(shard, survey, on_bad, bad, problems):
                records += len(checked)
                if sized:
                    np.asarray(survey.sizes(shard, checked), dtype=np.int64).tofile(out)
    except BadShard as error:
        if on_bad == "error":
            raise DataError(f"{error}; {FIX}") from None
        problems.append(str(error))
        return {"records": 0, "bad": -1}
    np.save(folder / f"bad-{i}.npy", np.frombuffer(bad, dtype=np.int64))
    return {"records": records, "bad": len(bad)}


def _checked_batches(
    shard: Shard, survey: Survey, on_bad: str, bad: array, problems: list[str]
) -> Iterator[Any]:
    """What the survey's check returns of each usable record, in batches (lists) of up to
    :data:`BATCH_ROWS` records or :data:`BATCH_CHARACTERS` characters of text; the rows of
    unusable ones go to ``bad`` (or stop the pass). A Parquet or Arrow batch the survey passes
    whole (``check_column``) comes as the survey made it, no row made a Python object."""
    whole = getattr(survey, "check_column", None)
    if whole is None or shard.kind not in TABLE_KINDS:
        yield from _batched(_checked(shard, survey, raw_rows(shard, survey.columns), on_bad, bad, problems))
        return
    for start, batch in raw_batches(shard, survey.columns):
        passed = None if isinstance(batch, BadRecord) else whole(batch)
        if passed is not None:
            yield passed
            continue
        rows = [(start, batch)] if isinstance(batch, BadRecord) else batch_rows(batch, start)
        yield from _batched(_checked(shard, survey, rows, on_bad, bad, problems))


def _checked(
    shard: Shard,
    survey: Survey,
    rows: Iterable[tuple[int, Any]],
    on_bad: str,
    bad: array,
    problems: list[str],
) -> Iterator[Any]:
    for row, stored in rows:
        try:
            yield survey.check(shard, row, parse(shard, row, stored))
        except BadRecord as error:
            if on_bad == "error":
                raise DataError(f"{error}; {FIX}") from None
            bad.append(row)
            if len(problems) < SHOWN:
                problems.append(str(error))


def _batched(checked: Iterable[Any]) -> Iterator[list]:
    batch, characters = [], 0
    for value in checked:
        batch.append(value)
        characters += len(value) if isinstance(value, str) else 0
        if len(batch) >= BATCH_ROWS or characters >= BATCH_CHARACTERS:
            yield batch
            batch, characters = [], 0
    if batch:
        yield batch


FIX = "fix or remove it, or set data.on_bad_record: skip to leave such records out"


def _load(
    folder: Path, shards: Sequence[Shard], record: dict, stamps: Sequence[tuple[int, int]]
) -> CorpusIndex:
    indexed, skipped = [], 0
    for i, (shard, entry, stamped) in enumerate(zip(shards, record["shards"], stamps, strict=True)):
        if entry["bad"] < 0:  # a file that cannot be read at all
            skipped += 1
            indexed.append(ShardIndex(shard, 0, np.zeros(0, np.int64), None, stamped))
            continue
        sizes = folder / f"sizes-{i}.bin" if record.get("sized") else None
        bad = np.load(folder / f"bad-{i}.npy")
        skipped += len(bad)
        indexed.append(ShardIndex(shard, entry["records"], bad, sizes, stamped))
    return CorpusIndex(tuple(indexed), {**record["found"], "problems": record["problems"]}, skipped)


def _refuse_or_report(index: CorpusIndex, folder: Path, on_bad: str) -> None:
    problems = index.found["problems"]
    if on_bad == "error":  # indexed before with skip: the same records are still bad
        raise DataError(f"{problems[0]}; {FIX}")
    total = sum(s.records for s in index.shards)
    log.warning(
        f"left out {index.skipped} bad record(s) or unreadable file(s) ({total} records kept, "
        f"data.on_bad_record: skip); the first: {'; '.join(problems)}"
    )


def records(
    part: ShardIndex, columns: Sequence[str], start: int, stop: int
) -> Iterator[tuple[int, int, Any]]:
    """(record number, row, stored row) of the usable records ``start`` .. ``stop - 1`` of a
    shard, in file order, bad rows left out as the index found them. The file is checked
    against its index first, and :class:`ShardChanged` names it when it no longer matches."""
    if stop <= start:
        return
    if part.stamp != (-1, -1):
        check_unchanged(part.shard, part.stamp)
    try:
        yield from _records(part, columns, start, stop)
    except OSError as error:  # deleted between the check and the open
        raise ShardChanged(
            f"{part.shard.path} cannot be read ({error.strerror}): was it deleted or moved?"
        ) from None


def _records(
    part: ShardIndex, columns: Sequence[str], start: int, stop: int
) -> Iterator[tuple[int, int, Any]]:
    bad = part.bad
    by_line = part.shard.kind in LINE_KINDS  # lines are read one by one anyway: counted from the first
    first = 0 if by_line else _row_of(part, start)
    record = 0 if by_line else start
    skip = int(np.searchsorted(bad, first))  # bad rows before the first one read
    for row, stored in raw_rows(part.shard, columns, first):
        if skip < len(bad) and bad[skip] == row:
            skip += 1
            continue
        if isinstance(stored, BadRecord):
            raise DataError(f"{stored}: not found when the file was indexed; has it changed since?")
        if record >= start:
            yield record, row, stored
        record += 1
        if record >= stop:
            return
    raise ShardChanged(
        f"{part.shard.path} ended after {record} records, its index says {part.records}; has it changed "
        "since it was indexed? Train again (or zoo resume the run) to index it as it is now"
    )


def _row_of(part: ShardIndex, record: int) -> int:
    """The row of a Parquet or Arrow shard's ``record``-th usable record: each bad row at or
    before it moves it one row on."""
    row = record
    for bad in part.bad.tolist():
        if bad > row:
            break
        row += 1
    return row
