"""Generated text corpora for the streaming benchmarks: any size, written in seconds a GB.

Documents of 40-400 words drawn from a Zipf vocabulary of 30,000 made-up words. A pool of
distinct documents is drawn once (one numpy draw for all its words); the shards then take
documents from the pool in a seeded random order, so a corpus of several GB costs the pool's
drawing plus writing, not drawing every word of it. Shards alternate JSONL and Parquet.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = 30_000
POOL_CHARACTERS = 40_000_000  # distinct text, about: documents repeat beyond it


def document_pool(characters: int, seed: int = 0) -> list[str]:
    """Distinct documents of about ``characters`` characters in all."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}{'abcdefgh'[i % 8]}" for i in range(WORDS)], dtype=object)
    weights = 1 / np.arange(1, WORDS + 1) ** 1.1
    lengths = rng.integers(40, 400, size=max(1, characters // 1300))  # words of about 6 characters
    drawn = words[rng.choice(WORDS, int(lengths.sum()), p=weights / weights.sum())]
    return [" ".join(document) for document in np.split(drawn, np.cumsum(lengths)[:-1])]


def write_corpus(folder: Path, megabytes: float, shard_mb: float, seed: int = 0) -> float:
    """Shards of about ``shard_mb`` MB of text in ``folder`` until ``megabytes`` MB of text are
    written (``part-0000.jsonl``, ``part-0001.parquet``, ...); returns the MB of text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    pool = document_pool(int(min(megabytes, POOL_CHARACTERS / 1e6) * 1e6), seed)
    sizes = np.array([len(d) for d in pool])
    rng = np.random.default_rng(seed + 1)
    written, shard = 0, 0
    while written < megabytes * 1e6:
        order = rng.permutation(len(pool))
        take = int(np.searchsorted(np.cumsum(sizes[order]), shard_mb * 1e6)) + 1
        documents = [pool[i] for i in order[:take]]
        path = folder / f"part-{shard:04d}.{'jsonl' if shard % 2 == 0 else 'parquet'}"
        if path.suffix == ".jsonl":
            path.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
        else:
            pq.write_table(pa.table({"text": documents}), path, row_group_size=2000)
        written, shard = written + int(sizes[order[:take]].sum()), shard + 1
    return written / 1e6


def bpe_sample(folder: Path, count: int = 400) -> list[str]:
    """The first documents of the first shard: what the benchmarks' BPE learns from."""
    with open(folder / "part-0000.jsonl") as lines:
        return [json.loads(line)["text"] for _, line in zip(range(count), lines, strict=False)]
