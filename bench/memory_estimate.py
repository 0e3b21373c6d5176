"""The peak memory zoo estimates before a comparison, against the peak a real one reaches.

Each shape runs ``zoo compare`` in a subprocess of its own (the frameworks' libraries count
in its resident size, as they do for a user) and reads its peak resident set size from
``ru_maxrss``; the estimate is zoo.peak_memory's, computed before anything is built. Prints
one row per shape with estimate / measured; the target is within 30 %.

    .venv/bin/python bench/memory_estimate.py [--shapes gpt2 bert-base resnet50] [--steps 1]
        [--forward-only] [--set model.n_layer=4] [--cap 9] [--estimate-only]

A watchdog polls the comparison's resident size every 0.2 s and kills it past ``--cap`` GB
(default 9), so a shape too large for a shared machine is stopped before the kernel would
kill something else: its row then says ">= cap" (a lower bound). Run one shape at a time.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GB = 2**30  # as zoo.peak_memory prints sizes
# Each shape at a small batch, on the shipped recipe of its task (short sequences, small images).
SHAPES = {
    "gpt2": ("gpt2-micro-pydocs.yaml", ["model.architecture=gpt2", "data.seq_len=64", "data.batch_size=2"]),
    "bert-base": (
        "bert-micro-pydocs-topics.yaml",
        ["model.architecture=bert-base", "data.max_length=64", "data.batch_size=2"],
    ),
    "resnet50": (
        "resnet18-digits32-0to4.yaml",
        ["model.architecture=resnet50", "data.image_size=64", "data.batch_size=2"],
    ),
}
POLL_S = 0.2


def estimate(recipe: Path, overrides: list[str], training: bool) -> int:
    from zoo import peak_memory
    from zoo.compare.runner import resolve
    from zoo.compare.twins import prepare

    setup = prepare(resolve(recipe, overrides, None, None))
    inputs = setup.dataset.train.x[: setup.batch_size]
    found = peak_memory.compare_estimate(
        setup.recipe, setup.family, setup.config, inputs, fine_tune=False, training=training
    )
    print(f"  estimate: {found.describe()}", flush=True)
    return found.total


def resident(pid: int) -> int:
    """VmRSS of ``pid`` in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measured(command: list[str], cap: int) -> tuple[int, bool]:
    """Peak resident bytes of ``command`` in its own process (memory check off), and whether
    the watchdog stopped it at ``cap`` (the peak is then a lower bound)."""
    env = {**os.environ, "ZOO_AVAILABLE_MEMORY": "unlimited"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stopped = False
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)  # reaped here, with its rusage
        if pid:
            break
        if not stopped and resident(process.pid) > cap:
            process.send_signal(signal.SIGKILL)
            stopped = True
        time.sleep(POLL_S)
    words = "stopped at the cap" if stopped else f"exit {os.waitstatus_to_exitcode(status)}"
    print(f"  {process.stdout.read().strip()} ({words})", flush=True)
    return usage.ru_maxrss * 1024, stopped  # kilobytes on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--speed-steps", type=int, default=0)
    parser.add_argument("--forward-only", action="store_true", help="compare's forward check alone")
    parser.add_argument("--set", dest="extra", action="append", default=[], help="another override")
    parser.add_argument("--cap", type=float, default=9.0, help="GB of resident memory to stop a run at")
    parser.add_argument("--estimate-only", action="store_true", help="print the estimates, run nothing")
    args = parser.parse_args()
    rows = []
    for shape in args.shapes:
        name, overrides = SHAPES[shape]
        overrides = [*overrides, *args.extra]
        recipe = ROOT / "recipes" / name
        label = " ".join([shape, *args.extra, *(["forward-only"] if args.forward_only else [])])
        print(f"{label}:", flush=True)
        guess = estimate(recipe, overrides, not args.forward_only)
        if args.estimate_only:
            rows.append((label, guess, None, False))
            continue
        with tempfile.TemporaryDirectory() as folder:
            command = [sys.executable, "-m", "zoo.cli", "compare", str(recipe), "--steps", str(args.steps),
                       "--speed-steps", str(args.speed_steps), "--out", str(Path(folder) / "report"),
                       "--quiet", *(["--forward-only"] if args.forward_only else []),
                       *(word for o in overrides for word in ("--set", o))]  # fmt: skip
            peak, stopped = measured(command, int(args.cap * GB))
        rows.append((label, guess, peak, stopped))
    print("\n| shape | estimate GB | measured GB | estimate / measured |\n|---|---|---|---|")
    for label, guess, peak, stopped in rows:
        if peak is None:
            print(f"| {label} | {guess / GB:.2f} | not run | |")
            continue
        ratio = f"<= {guess / peak:.2f}" if stopped else f"{guess / peak:.2f}"
        print(f"| {label} | {guess / GB:.2f} | {'>= ' if stopped else ''}{peak / GB:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
