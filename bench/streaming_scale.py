"""Streaming data at scale: a corpus several times a memory figure, indexed and trained on in
each framework, peak resident memory at 1x, 2x and 4x of it. One run, every figure side by side.

Generates (bench/text_corpus.py) ``--gb`` GB of text (1x) in shards of about 32 MB, half JSONL
and half Parquet, and its 2x and 4x (the same shards copied under other names: the files are
read again, nothing is shared), under ``--work`` (deleted at the end unless ``--keep``); and
one small JSONL test file, the same for every run (the carved test split would grow with the
corpus, and the evaluation with it).

Then, for each corpus and framework, a fresh process trains gpt2-micro (seq 128, batch 16, a
character vocabulary, ``data.workers=0``: everything in one process) ``--steps`` steps from an
empty index cache, so it first indexes the whole corpus: reads, parses and checks every
document and counts its tokens (bench/stream_index.py measures that pass alone). The training
split is the corpus' whole epoch (the sampler, or tf.data's keys, span all of it); the
framework stops after ``--steps`` steps (``bench/streaming.py``'s ``stop_after``). Reported:
the seconds of the plan (the index pass, mostly), the seconds from the process's start to the
first training batch, the peak resident memory (``VmHWM``) after the plan and at the end.

The character vocabulary is what makes a corpus of GBs feasible on a small machine: a
byte-level BPE counts tokens at about 1 MB per CPU second here (bench/stream_index.py), which
would make every run an index pass of hours; the memory bound does not depend on the
tokenizer (the index pass holds a batch of documents either way).

No hard cap is applied: the figures are the processes' measured peaks against ``--cap-gb``.

    .venv/bin/python bench/streaming_scale.py [--gb 1.5] [--steps 20] [--cap-gb 2] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import streaming
import text_corpus

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
HEADING = "## Streaming data at scale (`bench/streaming_scale.py`)"
SCALES = (1, 2, 4)
FRAMEWORKS = ("lightning", "keras")
SHARD_MB = 32
TEST_DOCUMENTS = 20


def write_corpora(work: Path, gigabytes: float) -> tuple[dict[int, Path], Path, dict[int, float]]:
    """The 1x, 2x and 4x corpora, the test file, and each corpus' GB of text."""
    folders = {scale: work / f"corpus-{scale}x" for scale in SCALES}
    shutil.rmtree(work, ignore_errors=True)
    text = text_corpus.write_corpus(folders[1], gigabytes * 1000, SHARD_MB) / 1000
    for scale in SCALES[1:]:
        folders[scale].mkdir()
        for copy in range(scale):
            for path in sorted(folders[1].iterdir()):
                shutil.copy(path, folders[scale] / f"copy{copy}-{path.name}")
    test = work / "test.jsonl"
    pool = text_corpus.document_pool(TEST_DOCUMENTS * 1300, seed=7)
    test.write_text("".join(json.dumps({"text": d}) + "\n" for d in pool))
    return folders, test, {scale: text * scale for scale in SCALES}


def recipe(data: Path, test: Path) -> dict:
    raw = streaming.recipe("gpt2-micro", data, 0)
    raw["data"] = {**raw["data"], "tokenizer": "char", "test": [str(test)]}
    raw["data"].pop("test_fraction")
    raw["trainer"]["max_epochs"] = 1
    return raw


def measure(args) -> str:
    work = Path(args.work).resolve()
    started_load, started = streaming.load(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    clock = time.perf_counter()
    folders, test, text = write_corpora(work, args.gb)
    written = time.perf_counter() - clock
    shards = {scale: len(list(folders[scale].iterdir())) for scale in SCALES}
    found = {}
    try:
        for scale in SCALES:
            for framework in FRAMEWORKS:
                cache = work / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                spec = {"recipe": recipe(folders[scale], test), "framework": framework,
                        "steps": args.steps, "runs": str(work / "runs"), "cache": str(cache),
                        "name": f"scale-{scale}-{framework}", "whole_epoch": True}  # fmt: skip
                found[scale, framework] = streaming.child("train", spec)
                print(f"{scale}x {framework}: {found[scale, framework]}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - clock
    return report(args, started, started_load, text, shards, found, written, total)


def report(args, started, started_load, text, shards, found, written, total) -> str:
    lines = [
        "```bash",
        f".venv/bin/python bench/streaming_scale.py --gb {args.gb} --steps {args.steps} "
        f"--cap-gb {args.cap_gb} --write-results",
        "```",
        "",
        f"Measured {started}, commit {streaming.commit()}, on {os.cpu_count()} cores; load averages "
        f"(1, 5, 15 min) {started_load} at the start, {streaming.load()} at the end; "
        f"{total / 60:.0f} minutes in all ({written / 60:.1f} writing the corpora). Generated text, "
        f"half JSONL and half Parquet shards of about {SHARD_MB} MB; gpt2-micro, seq 128, batch 16, "
        f"character vocabulary, {args.steps} training steps, `data.workers=0`; each run a fresh process "
        "from an empty index cache. No hard cap applied: the peaks are measured (`VmHWM`) against a "
        f"{args.cap_gb:g} GB figure.",
        "",
        "| corpus | GB of text | shards | framework | plan s (index pass) | first batch s | "
        "peak MB after plan | peak MB | peak / cap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for scale in SCALES:
        for framework in FRAMEWORKS:
            run = found[scale, framework]
            peak, planned, cap = run["peak_rss"] / 1e6, run["plan_peak_rss"] / 1e6, args.cap_gb * 1e3
            lines.append(
                f"| {scale}x | {text[scale]:.2f} | {shards[scale]} | {framework} | {run['plan_s']:.0f} | "
                f"{run['first_batch_s']:.0f} | {planned:.0f} | {peak:.0f} | {peak / cap:.0%} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=1.5, help="GB of text of the 1x corpus")
    parser.add_argument("--steps", type=int, default=20, help="training steps")
    parser.add_argument(
        "--cap-gb", type=float, default=2.0, help="the memory figure the peaks are set against"
    )
    parser.add_argument("--work", default=str(OUT / "stream-scale"), help="where the corpora are written")
    parser.add_argument("--keep", action="store_true", help="keep the corpora")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    streaming.publish(measure(args), "streaming_scale", HEADING, args.write_results)


if __name__ == "__main__":
    main()
