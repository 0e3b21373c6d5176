"""Small corpora for the streaming tests: shards whose every record names itself.

Record ``n`` (counted over the shards in the order written) has the text ``example n ...`` and,
for classification, the label ``n``, so a batch's labels are the ids of its examples.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "zoo",
    "streams",
    "its",
    "shards",
]


def text_of(n: int) -> str:
    """A document of its own length, so that token counts differ from record to record."""
    return f"example {n} " + " ".join(WORDS[(n + i) % len(WORDS)] for i in range(3 + n % 11))


def write_corpus(folder: Path, sizes: Sequence[int], kinds: Sequence[str] = ("jsonl",)) -> list[Path]:
    """Shards of ``sizes`` records, the i-th of kind ``kinds[i % len(kinds)]``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, n = [], 0
    for i, size in enumerate(sizes):
        kind = kinds[i % len(kinds)]
        rows = [{"text": text_of(n + k), "label": n + k} for k in range(size)]
        n += size
        path = folder / f"part-{i:03d}.{kind}"
        if kind == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        elif kind == "csv":
            path.write_text("text,label\n" + "".join(f'"{r["text"]}",{r["label"]}\n' for r in rows))
        elif kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=max(1, size // 3))
        paths.append(path)
    return paths
