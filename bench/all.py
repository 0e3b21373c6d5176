"""Every speed table of bench/RESULTS.md from one run at one commit: what ``make bench`` runs.

Each benchmark runs in turn, in its own process, and rewrites its own section of RESULTS.md;
this script then rewrites the header section (:data:`HEADING`) with the commit, the machine
and what each benchmark took, so a reader can tell which tables came from the run. A
benchmark that fails leaves its section as it was, is named in the header, and the others
still run; the exit status is 1 if any failed.

    .venv/bin/python bench/all.py [--rounds 2] [--only speed,compile] [--dry-run]

``--rounds`` goes to every benchmark that takes fastest-of-N rounds (the others repeat
inside one process). On a quiet 2-core machine, ``--rounds 1`` took 53 minutes and
``--rounds 2`` takes about 90 (timed before issue 41 added prediction, cold_start and
peers), most of it ``real_sizes`` (gpt2 and bert-base steps of
several seconds, four ways each) and ``data_parallel``. Run it with nothing else on the
machine: every figure is a fastest-of, and other work only slows runs down.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from results_section import RESULTS, write_section  # noqa: E402  (bench/ is the script's folder)

HEADING = "## The last `make bench` run"

# (name, script, arguments, takes --rounds): issue 18's tables, cheapest first so that a run
# stopped early has written the most sections.
BENCHMARKS: list[tuple[str, str, list[str], bool]] = [
    ("gpu", "gpu.py", [], False),  # on a machine without a GPU: the "no GPU lent" section
    ("checkpoint_io", "checkpoint_io.py", ["--rounds", "3"], False),
    ("framework_profile", "framework_profile.py", [], False),
    ("generation", "generation.py", [], True),  # issue 41: Keras compiled greedy generation
    ("prediction", "prediction.py", [], True),  # issue 41: zoo predict's traced Keras forward
    ("cold_start", "cold_start.py", [], True),  # issue 41: a 0.5 GB checkpoint into each twin
    ("quantization", "quantization.py", [], False),  # issue 44: int8/int4 files, loads, quality
    ("peers", "peers.py", [], True),  # issue 41: transformers, keras-hub, timm (the bench extra)
    ("speed", "speed.py", ["--epochs", "4"], True),
    ("compile", "compile.py", ["--steps", "5", "--rounds", "3"], False),  # rounds in one process
    ("data_parallel", "data_parallel.py", [], True),
    ("real_sizes", "real_sizes.py", [], True),
]


def commit() -> str:
    """The commit measured, marked when the tree has changes: figures of uncommitted code
    cannot be reproduced from the history."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "zoo", "architectures", "bench"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    changed = any(not line.endswith("RESULTS.md") for line in dirty.stdout.splitlines())
    return head.stdout.strip() + (" (with uncommitted changes)" if changed else "")


def cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?")


def command(script: str, extra: list[str], takes_rounds: bool, rounds: int) -> list[str]:
    line = [sys.executable, str(BENCH / script), *extra, "--write-results"]
    return line + (["--rounds", str(rounds)] if takes_rounds else [])


def header(when: str, revision: str, rounds: int, ran: list[tuple[str, float, int]], load: tuple) -> str:
    rows = [
        f"| `{name}` | {seconds / 60:.1f} | {'ok' if code == 0 else f'**failed ({code})**'} |"
        for name, seconds, code in ran
    ]
    failed = [name for name, _, code in ran if code]
    lines = [
        f"Started {when}, commit {revision}, `bench/all.py --rounds {rounds}` "
        f"on {os.cpu_count()} cores ({cpu_name()}); load average {load[0]:.1f} at the start, "
        f"{load[1]:.1f} at the end. The sections these benchmarks write below are from this run;",
        "the others carry their own date and commit.",
        "",
        "| benchmark | minutes | status |",
        "|---|---|---|",
        *rows,
    ]
    if failed:
        lines += ["", f"Failed, their sections left as they were: {', '.join(failed)}."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="fastest-of rounds per benchmark")
    parser.add_argument("--only", help=f"comma-separated, from {', '.join(b[0] for b in BENCHMARKS)}")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)  # tests
    args = parser.parse_args()
    names = [b[0] for b in BENCHMARKS]
    chosen = args.only.split(",") if args.only else names
    unknown = [name for name in chosen if name not in names]
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; choose from {', '.join(names)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    plan = [
        (name, command(script, extra, takes, args.rounds))
        for name, script, extra, takes in BENCHMARKS
        if name in chosen
    ]
    if args.dry_run:
        for _, line in plan:
            print(" ".join(line[1:]))
        return 0
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    revision, load_at_start = commit(), os.getloadavg()[0]
    ran: list[tuple[str, float, int]] = []
    for name, line in plan:
        print(f"== {name}: {' '.join(line[1:])}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        code = subprocess.run(line, cwd=ROOT).returncode
        ran.append((name, time.perf_counter() - started, code))
        # After each benchmark, so that a run cut short still says what it measured.
        load = (load_at_start, os.getloadavg()[0])
        write_section(HEADING, header(when, revision, args.rounds, ran, load), args.results)
    return 1 if any(code for _, _, code in ran) else 0


if __name__ == "__main__":
    sys.exit(main())
