"""The streaming index pass (data.name stream, language modelling): MB of text a second, by
shard format and tokenizer, this checkout against another one side by side in one run.

Generates (once, kept under bench/out/stream-index/) ``--mb`` MB of text in shards of 6 MB,
half JSONL and half Parquet (bench/text_corpus.py), and a byte-level BPE of 4096 tokens learnt
from its first documents. Then, for each checkout (``--baseline`` first, this one second) and
each of (JSONL, Parquet) x (the BPE, a character vocabulary), a fresh process imports zoo from
that checkout and indexes those shards from an empty cache (reads, parses, checks and sizes
every document: what stands between ``zoo train`` and its first batch the first time it meets a
corpus). Reported: wall seconds, CPU seconds (every thread of the process: a tokenizer that
encodes on every core spends more CPU than wall time), and MB of text per wall and per CPU
second. Prints the table and writes bench/out/stream_index.md; ``--write-results`` also
rewrites the section of bench/RESULTS.md.

    .venv/bin/python bench/stream_index.py [--mb 60] [--baseline /work/main] [--write-results]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import text_corpus
from streaming import commit, load, publish

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
WORK = OUT / "stream-index"
HEADING = "## Streaming index pass (`bench/stream_index.py`)"
KINDS = ("jsonl", "parquet")
VOCABULARIES = ("bpe", "char")
SHARD_MB = 6
REPEATS = {"bpe": 1, "char": 5}  # passes a row times (each from an empty cache), the fastest kept


def corpus(megabytes: int) -> tuple[Path, dict[str, float]]:
    """The shards (written once) and the MB of text of each format's."""
    import pyarrow.parquet as pq

    folder = WORK / f"corpus-{megabytes}mb"
    if not (folder / "done").is_file():
        from zoo.tokenizer import DEFAULT_SPECIAL_TOKENS, train_bpe

        shutil.rmtree(folder, ignore_errors=True)
        text_corpus.write_corpus(folder, megabytes, SHARD_MB)
        train_bpe(text_corpus.bpe_sample(folder), 4096, DEFAULT_SPECIAL_TOKENS).save(folder)
        (folder / "done").touch()
    text = dict.fromkeys(KINDS, 0.0)
    for path in folder.glob("part-*"):
        if path.suffix == ".jsonl":
            with open(path) as lines:
                text["jsonl"] += sum(len(json.loads(line)["text"]) for line in lines) / 1e6
        else:
            text["parquet"] += sum(len(t) for t in pq.read_table(path)["text"].to_pylist()) / 1e6
    return folder, text


def index_once(spec: dict) -> dict:
    """In a fresh process: index the shards of one format with one vocabulary, zoo imported
    from ``spec["checkout"]``, the cache empty."""
    for module in ("pyarrow.compute", "pyarrow.parquet", "tokenizers"):
        importlib.import_module(module)  # before the clock starts, as a long run has them
    sys.path.insert(0, spec["checkout"])
    from zoo.data.shards import find_shards
    from zoo.data.stream_index import corpus_index
    from zoo.data.stream_tasks import TokenExamples
    from zoo.tokenizer import load_tokenizer

    folder = Path(spec["folder"])
    shards = find_shards([str(folder / f"part-*.{spec['kind']}")], "data.path")
    tokenizer = load_tokenizer(folder / "tokenizer.json") if spec["vocabulary"] == "bpe" else None
    best = None
    for repeat in range(spec["repeats"]):
        os.environ["ZOO_CACHE"] = str(WORK / "cache" / str(repeat))
        examples = TokenExamples("text", 128, tokenizer)
        wall, cpu = time.perf_counter(), time.process_time()
        index = corpus_index(shards, examples, "error", True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        best = min(best or (wall, cpu), (wall, cpu))
    tokens = sum(part.total(0, part.records) for part in index.shards)
    return {"wall": best[0], "cpu": best[1], "tokens": tokens, "imported": sys.modules["zoo"].__file__}


def child(spec: dict) -> dict:
    cache = WORK / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    command = [sys.executable, __file__, "--child", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=7200)
    shutil.rmtree(cache, ignore_errors=True)
    if done.returncode:
        raise RuntimeError(f"{spec} failed:\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if not found["imported"].startswith(spec["checkout"]):
        raise RuntimeError(f"zoo came from {found['imported']}, not {spec['checkout']}")
    return found


def measure(args) -> str:
    folder, text = corpus(args.mb)
    checkouts = {"baseline": Path(args.baseline).resolve(), "this": ROOT} if args.baseline else {"this": ROOT}
    started_load, started = load(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    for vocabulary in VOCABULARIES:
        for kind in KINDS:
            tokens = set()
            for name, checkout in checkouts.items():
                found = child({"checkout": str(checkout), "folder": str(folder), "kind": kind,
                               "vocabulary": vocabulary, "repeats": REPEATS[vocabulary]})  # fmt: skip
                tokens.add(found["tokens"])
                rows.append((vocabulary, kind, name, checkout, found))
                print(f"{vocabulary} {kind} {name}: {found}", file=sys.stderr)
            if len(tokens) != 1:
                raise RuntimeError(f"{vocabulary} {kind}: the checkouts count different tokens: {tokens}")
    lines = [
        "```bash",
        f".venv/bin/python bench/stream_index.py --mb {args.mb}"
        + (f" --baseline {args.baseline}" if args.baseline else "")
        + " --write-results",
        "```",
        "",
        f"Measured {started} on {os.cpu_count()} cores; load averages (1, 5, 15 min) {started_load} at "
        f"the start, {load()} at the end. {text['jsonl']:.0f} MB of text in JSONL and "
        f"{text['parquet']:.0f} MB in Parquet shards of about {SHARD_MB} MB; BPE: byte-level, 4096 "
        "tokens; char: the vocabulary the pass collects. Each row a fresh process indexing from an empty "
        f"cache (char: the fastest of {REPEATS['char']} such passes).",
        "",
        "| vocabulary | format | checkout | wall s | CPU s | MB/s (wall) | MB per CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for vocabulary, kind, name, checkout, found in rows:
        mb = text[kind]
        lines.append(
            f"| {vocabulary} | {kind} | {name} ({commit(checkout)}) | {found['wall']:.1f} | "
            f"{found['cpu']:.1f} | {mb / found['wall']:.2f} | {mb / found['cpu']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=60, help="MB of text, about (half of it in each format)")
    parser.add_argument("--baseline", help="another checkout of zoo to measure first (e.g. /work/main)")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(index_once(json.loads(args.child))))
        return
    WORK.mkdir(parents=True, exist_ok=True)
    publish(measure(args), "stream_index", HEADING, args.write_results)


if __name__ == "__main__":
    main()
