"""Kernel threads on a busy machine: the framework's default (every core) against zoo's rule.

``trainer.num_threads`` left unset used to leave each framework its default: a thread per core,
whatever else the cores were running. zoo now takes the CPUs free for the process (its affinity
less the 1-minute load average, zoo.hardware.free_cpus). Side by side in one run, each in a fresh
``zoo train`` process (the digits recipe's convnet-small, validation off), in both frameworks:

  every core   trainer.num_threads = the CPUs of this process's affinity (the old default)
  zoo's rule   trainer.num_threads unset (ZOO_NUM_THREADS unset too): what zoo chooses

under two loads: the machine as it is, and with ``--busy`` more processes spinning on the cores
(default: one per CPU, as another training would; started ahead, so that the load average has
risen, as it has under a run that has been going for minutes). A step's time is the fastest
epoch after the first over ``--rounds`` interleaved runs, per optimizer step; the ratio is
every core / zoo's rule (above 1: the rule is faster).

    .venv/bin/python bench/threads_under_load.py [--rounds 2] [--epochs 3] [--busy N]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "cnn-digits.yaml"
FRAMEWORKS = ("lightning", "keras")
WAYS = ("every core", "zoo's rule")


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def step_seconds(framework: str, way: str, epochs: int, out: Path) -> tuple[float, int]:
    """The fastest epoch after the first, per optimizer step, and the threads the run used."""
    sets = [
        "trainer.progress_bar=false", f"trainer.max_epochs={epochs}", "data.val_fraction=0",
        "tracking.tensorboard=false", f"export.dir={out}", "export.run_name=run",
    ]  # fmt: skip
    if way == "every core":
        sets.append(f"trainer.num_threads={cpus()}")
    command = [sys.executable, "-m", "zoo.cli", "train", str(RECIPE), "--framework", framework]
    command += [a for s in sets for a in ("--set", s)]
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")}
    subprocess.run(
        command, check=True, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=ROOT, capture_output=True
    )
    with open(out / "run" / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    steps = [int(r["step"]) for r in rows]
    per_step = [
        float(r["epoch_seconds"]) / (s - p) for r, s, p in zip(rows[1:], steps[1:], steps, strict=False)
    ]
    threads = json.loads((out / "run" / "summary.json").read_text())["metrics"]["num_threads"]
    return min(per_step), threads


def spin(count: int, settle_s: float) -> list[subprocess.Popen]:
    """``count`` processes that keep a core each busy; returns once the load average shows them."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    deadline = time.monotonic() + settle_s
    while os.getloadavg()[0] < 0.8 * count and time.monotonic() < deadline:
        time.sleep(2)
    return busy


def measure(label: str, rounds: int, epochs: int) -> dict[tuple[str, str], tuple[float, int]]:
    found: dict[tuple[str, str], list[tuple[float, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for framework in FRAMEWORKS:
                for way in WAYS:
                    out = Path(tmp) / f"{r}-{framework}-{way.replace(' ', '-')}"
                    load = os.getloadavg()[0]
                    result = step_seconds(framework, way, epochs, out)
                    found.setdefault((framework, way), []).append(result)
                    print(f"  {label}, {framework}, {way}: {1000 * result[0]:.2f} ms/step on {result[1]} "
                          f"thread(s), load {load:.1f}", file=sys.stderr, flush=True)  # fmt: skip
    return {key: min(values) for key, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--busy", type=int, default=cpus(), help="spinning processes (default: one per CPU)")
    parser.add_argument(
        "--settle", type=float, default=90.0, help="seconds to wait for the load to show them"
    )
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{started}, {cpus()} CPUs, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    results = {"as it is": measure("as it is", args.rounds, args.epochs)}
    busy = spin(args.busy, args.settle)
    try:
        results[f"+{args.busy} busy"] = measure(f"+{args.busy} busy", args.rounds, args.epochs)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    print("\n| machine | framework | every core, ms/step (threads) | zoo's rule, ms/step (threads) | ratio |")
    print("|---|---|---|---|---|")
    for label, found in results.items():
        for framework in FRAMEWORKS:
            (old, old_threads), (new, new_threads) = (found[(framework, way)] for way in WAYS)
            cells = [
                f"{1000 * old:.2f} ({old_threads})",
                f"{1000 * new:.2f} ({new_threads})",
                f"{old / new:.2f}",
            ]
            print(f"| {label} | {framework} | {' | '.join(cells)} |")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
