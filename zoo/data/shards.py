"""The files of a streaming split, and their records one at a time.

A shard is one file: Parquet, JSONL, CSV, plain text (a record a line) or an Arrow file of a
Hugging Face ``save_to_disk`` folder. :func:`raw_rows` reads a shard from the start, in file
order, and yields every row as it is stored (a JSONL line still unparsed, so that a reader that
will not use a row never parses it); :func:`parse` makes a row a record (a dict of columns).
A row that cannot be a record is a :class:`BadRecord` that names the file and the row.

Parquet and Arrow are read with pyarrow, a batch of rows at a time; text formats line by line.
Nothing holds more than one batch of a shard. Files are read, not memory mapped: mapped pages
would count in the process's resident memory as it reads on, however little it keeps.
"""

from __future__ import annotations

import csv
import glob
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.errors import DataError
from zoo.limits import MAX_JSON_BYTES, parse_json, read_json, require_regular_file

KINDS = {
    ".parquet": "parquet", ".arrow": "arrow", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".csv": "csv", ".txt": "text",
}  # fmt: skip
LINE_KINDS = ("jsonl", "csv", "text")  # rows named by line number; the others by row index
TABLE_KINDS = ("parquet", "arrow")  # read with pyarrow, a RecordBatch at a time
ARROW_BATCH = 1024  # Parquet rows read at once
SAVED_STATE = "state.json"  # a Hugging Face Dataset.save_to_disk folder
SAVED_SPLITS = "dataset_dict.json"  # a DatasetDict.save_to_disk folder: one such folder a split
BOM = b"\xef\xbb\xbf"  # what Windows editors (and PowerShell) put before UTF-8 text
# A CSV cell holds a document of up to the size a JSONL line may have, not the csv module's
# default of 128 KiB: a user's long document is a record either way.
CSV_FIELD_LIMIT = MAX_JSON_BYTES


@dataclass(frozen=True)
class Shard:
    path: str
    kind: str

    def where(self, row: int) -> str:
        """The row as a user finds it: a line number (from 1) or a row index (from 0)."""
        return f"{self.path}, {'line' if self.kind in LINE_KINDS else 'row'} {row}"


class BadRecord(DataError):
    """A row that is not a usable record; ``row`` is where :func:`raw_rows` numbered it."""

    def __init__(self, shard: Shard, row: int, problem: str):
        super().__init__(f"{shard.where(row)}: {problem}")
        self.shard, self.row, self.problem = shard, row, problem


class BadShard(DataError):
    """A file that cannot be read at all (a truncated Parquet file has no footer)."""


# ------------------------------------------------------------------------------ finding shards


def saved_splits(folder: Path) -> dict[str, Path]:
    """The split folders of a ``DatasetDict.save_to_disk`` folder, by split name."""
    listed = read_json(folder / SAVED_SPLITS, error=DataError)
    names = listed.get("splits")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{folder / SAVED_SPLITS}: has no list of 'splits'")
    return {name: folder / name for name in names}


def find_shards(entries: Sequence[str], field: str) -> list[Shard]:
    """The shards of a split, in the order given: each entry a file, a folder (its supported
    files, found recursively and sorted by path; or the Arrow files of a ``save_to_disk``
    folder, in its own order) or a glob pattern."""
    shards: list[Shard] = []
    for entry in entries:
        path = Path(entry)
        require_regular_file(path, DataError)  # a FIFO shard would block its reader
        if path.is_dir():
            found = saved_files(path) if (path / SAVED_STATE).is_file() else folder_files(path)
        elif path.is_file():
            found = [path]
        else:
            found = sorted(Path(p) for p in glob.glob(str(entry), recursive=True) if Path(p).is_file())
        if not found:
            raise DataError(f"{field} {entry!r}: no {', '.join(sorted(KINDS))} files there")
        for file in found:
            require_regular_file(file, DataError)  # one a save_to_disk folder lists
            kind = KINDS.get(file.suffix.lower())
            if kind is None:
                raise DataError(
                    f"{field}: {file} is not a file zoo streams; give {', '.join(sorted(KINDS))} files"
                )
            shards.append(Shard(str(file), kind))
    return shards


def folder_files(folder: Path) -> list[Path]:
    """A folder's data files, recursively, sorted; hidden files and folders left out."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix.lower() in KINDS
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def saved_files(folder: Path) -> list[Path]:
    """The Arrow files of a ``Dataset.save_to_disk`` folder, as its state.json lists them."""
    state = read_json(folder / SAVED_STATE, error=DataError)
    files = state.get("_data_files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and "filename" in f for f in files):
        raise DataError(f"{folder / SAVED_STATE}: has no list of '_data_files'")
    return [folder / f["filename"] for f in files]


def class_names(shard: Shard, column: str) -> list[str] | None:
    """The names a Hugging Face ``ClassLabel`` gives the label ids of ``column``, where the
    shard carries its features (a save_to_disk folder's dataset_info.json, or the schema
    metadata datasets writes into Parquet and Arrow files)."""

    info = Path(shard.path).with_name("dataset_info.json")
    features = None
    if shard.kind == "arrow" and info.is_file():
        features = read_json(info, error=DataError).get("features")
    elif shard.kind in ("parquet", "arrow"):
        metadata = arrow_schema(shard).metadata or {}
        if b"huggingface" in metadata:
            stored = parse_json(
                metadata[b"huggingface"], f"{shard.path}: its 'huggingface' metadata", error=DataError
            )
            written = stored.get("info")
            features = written.get("features") if isinstance(written, dict) else None
    label = features.get(column) if isinstance(features, dict) else None
    label = label if isinstance(label, dict) else {}
    names = label.get("names") if label.get("_type") == "ClassLabel" else None
    return list(names) if isinstance(names, list) else None


# ------------------------------------------------------------------------------ reading rows


def raw_rows(shard: Shard, columns: Sequence[str], first: int = 0) -> Iterator[tuple[int, Any]]:
    """(row, stored row) of every row from row ``first`` on (for line formats, ``first`` counts
    lines from 1): a JSONL line as bytes, a text line as str, a dict of ``columns`` otherwise.
    A row that cannot even be split from the others comes as a :class:`BadRecord`."""
    if shard.kind == "jsonl":
        return _lines(shard, first, keep_blank=False)
    if shard.kind == "text":
        return _text_lines(shard, columns[0] if columns else "text", first)
    if shard.kind == "csv":
        return _csv_rows(shard, columns, first)
    return _table_rows(raw_batches(shard, columns, first), first)


def parse(shard: Shard, row: int, stored: Any) -> dict:
    """The record a stored row holds; :class:`BadRecord` when it holds none."""
    if isinstance(stored, BadRecord):
        raise stored
    if shard.kind != "jsonl":
        return stored
    return parse_json(
        stored, shard.where(row), error=_bad(shard, row), fix="a .jsonl file holds one JSON object a line"
    )


def _bad(shard: Shard, row: int):
    """An error class for :func:`zoo.limits.parse_json` that makes a :class:`BadRecord`."""
    prefix = len(shard.where(row)) + 1

    def make(message: str) -> BadRecord:
        return BadRecord(shard, row, message[prefix:].strip())

    return make


def _lines(shard: Shard, first: int, keep_blank: bool) -> Iterator[tuple[int, bytes]]:
    """The file's lines, numbered from 1, a byte-order mark before the first left out (the CSV
    reader leaves it out too): it is no character of the text, and no JSON."""
    with open(shard.path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if number == 1 and line.startswith(BOM):
                line = line[len(BOM) :]
                if not line:  # a file of a BOM alone: no line
                    return
            if number < first or (not keep_blank and not line.strip()):
                continue
            yield number, line


def _text_lines(shard: Shard, column: str, first: int) -> Iterator[tuple[int, Any]]:
    for number, line in _lines(shard, first, keep_blank=True):
        try:
            yield number, {column: line.decode("utf-8")}
        except UnicodeDecodeError as error:
            yield number, BadRecord(shard, number, f"not UTF-8 text (byte {error.start}: {error.reason})")


def _csv_rows(shard: Shard, columns: Sequence[str], first: int) -> Iterator[tuple[int, Any]]:
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        with open(shard.path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in columns if c not in header]
            if missing:
                raise BadShard(
                    f"{shard.path}: the header row {header} has no column {', '.join(map(repr, missing))}; "
                    "name the columns with data.text_column, data.label_column (and the others)"
                )
            start = reader.line_num
            for row in reader:
                number = start + 1
                start = reader.line_num
                if number < first:
                    continue
                extra = row.get(None)
                if extra or any(row[c] is None for c in columns):
                    cells = len(header) + len(extra) if extra else sum(v is not None for v in row.values())
                    yield number, BadRecord(shard, number, f"{cells} cells under a header of {len(header)}")
                    continue
                yield number, row
    except UnicodeDecodeError as error:
        raise BadShard(f"{shard.path}: not UTF-8 text ({error})") from None
    except csv.Error as error:
        raise BadShard(f"{shard.path}: not a readable CSV file ({error})") from None


def parquet_file(shard: Shard):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(shard.path)
    except (pa.ArrowException, OSError) as error:
        raise BadShard(f"{shard.path}: not a readable Parquet file ({error}); is it cut short?") from None


def arrow_schema(shard: Shard):
    if shard.kind == "parquet":
        return parquet_file(shard).schema_arrow
    with _arrow_reader(shard) as reader:
        return reader.schema


def _check_columns(shard: Shard, names: Sequence[str], columns: Sequence[str]) -> list[str]:
    missing = [c for c in columns if c not in names]
    if missing:
        raise BadShard(
            f"{shard.path}: no column {', '.join(map(repr, missing))}; it has {', '.join(map(repr, names))} "
            "(set data.text_column / data.label_column / data.image_column)"
        )
    return list(columns)


def raw_batches(shard: Shard, columns: Sequence[str], first: int = 0) -> Iterator[tuple[int, Any]]:
    """A Parquet or Arrow shard a batch of rows at a time: (its first row, a pyarrow RecordBatch
    of ``columns``), or (row, :class:`BadRecord`) for each row of a Parquet row group that cannot
    be read. Parquet row groups that end before row ``first`` are not read."""
    return (
        _parquet_batches(shard, columns, first) if shard.kind == "parquet" else _arrow_batches(shard, columns)
    )


def _parquet_batches(shard: Shard, columns: Sequence[str], first: int) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa

    file = parquet_file(shard)
    wanted = _check_columns(shard, file.schema_arrow.names, columns)
    start = 0
    for group in range(file.num_row_groups):
        rows = file.metadata.row_group(group).num_rows
        if start + rows <= first:  # a whole row group before the first row: not read
            start += rows
            continue
        done = start
        try:
            for batch in file.iter_batches(ARROW_BATCH, row_groups=[group], columns=wanted):
                yield done, batch
                done += batch.num_rows
        except (pa.ArrowException, OSError) as error:
            problem = f"in a row group that cannot be read ({error})"
            for row in range(max(done, first), start + rows):
                yield row, BadRecord(shard, row, problem)
        start += rows


def _table_rows(batches: Iterator[tuple[int, Any]], first: int) -> Iterator[tuple[int, Any]]:
    for start, batch in batches:
        if isinstance(batch, BadRecord):
            yield start, batch
        else:
            yield from batch_rows(batch, start, first)


def batch_rows(batch, start: int, first: int = 0) -> Iterator[tuple[int, dict]]:
    """(row, record) of a RecordBatch whose first row is ``start``, from row ``first`` on."""
    if start + batch.num_rows <= first:
        return
    columns = batch.to_pydict()
    names = list(columns)
    for i, values in enumerate(zip(*columns.values(), strict=True)):
        if start + i >= first:
            yield start + i, dict(zip(names, values, strict=True))


class _arrow_reader:
    """An Arrow file: the stream format ``save_to_disk`` writes, or the file format."""

    def __init__(self, shard: Shard):
        self.shard = shard

    def __enter__(self):
        import pyarrow as pa

        try:
            self.source = pa.OSFile(self.shard.path)
        except (pa.ArrowException, OSError) as error:
            raise BadShard(f"{self.shard.path}: cannot be read ({error})") from None
        for opener in (pa.ipc.open_stream, pa.ipc.open_file):
            try:
                self.source.seek(0)
                reader = opener(self.source)
                return reader if opener is pa.ipc.open_stream else _FileBatches(reader)
            except pa.ArrowException:
                continue
        self.source.close()
        raise BadShard(f"{self.shard.path}: not an Arrow file (neither the stream nor the file format)")

    def __exit__(self, *exc):
        self.source.close()


class _FileBatches:
    """The file format's batches, read in order as the stream format's are."""

    def __init__(self, reader):
        self.reader, self.schema = reader, reader.schema

    def __iter__(self):
        return (self.reader.get_batch(i) for i in range(self.reader.num_record_batches))


def _arrow_batches(shard: Shard, columns: Sequence[str]) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa

    with _arrow_reader(shard) as reader:
        wanted = _check_columns(shard, reader.schema.names, columns)
        done = 0
        batches = iter(reader)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as error:
                raise BadShard(f"{shard.path}: cut short or damaged after row {done - 1} ({error})") from None
            yield done, batch.select(wanted)
            done += batch.num_rows


def image_source(shard: Shard, row: int, value: Any):
    """What PIL opens for an image cell: a path (relative to the shard's folder), or its bytes
    (a Hugging Face ``Image`` feature is {bytes, path})."""
    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path")
    if isinstance(value, bytes | bytearray):
        return io.BytesIO(value)
    if isinstance(value, str) and value:
        return os.path.join(os.path.dirname(shard.path), value)
    raise BadRecord(shard, row, f"the image cell is {type(value).__name__}, not a path or the image's bytes")
