"""The peak memory zoo estimates before a comparison, against the peak a real one reaches.

Each shape runs ``zoo compare`` in a subprocess of its own (the frameworks' libraries count
in its resident size, as they do for a user) and reads its peak resident set size from
``ru_maxrss``; the estimate is zoo.peak_memory's, computed before anything is built. Prints
one row per shape with estimate / measured; the target is within 30 %.

    .venv/bin/python bench/memory_estimate.py [--shapes gpt2 bert-base resnet50] [--steps 2]

gpt2 and bert-base compare at least four models of ~0.4 GB each: a gpt2 comparison passed 16 GB resident
(bench/RESULTS.md); run one shape at a time on a machine with more than 20 GB free.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def estimate(recipe: Path, overrides: list[str], speed: bool) -> int:
    from zoo import peak_memory
    from zoo.compare.runner import resolve
    from zoo.compare.twins import prepare

    setup = prepare(resolve(recipe, overrides, None, None))
    inputs = setup.dataset.train.x[: setup.batch_size]
    found = peak_memory.compare_estimate(
        setup.recipe, setup.family, setup.config, inputs, fine_tune=False, speed=speed, training=True
    )
    print(f"  estimate: {found.describe()}", flush=True)
    return found.total


def measured(recipe: Path, overrides: list[str], steps: int, speed_steps: int, out: Path) -> int:
    """Peak resident bytes of one ``zoo compare`` in its own process (memory check off)."""
    sets = [word for o in overrides for word in ("--set", o)]
    command = [sys.executable, "-m", "zoo.cli", "compare", str(recipe), "--steps", str(steps),
               "--speed-steps", str(speed_steps), "--out", str(out), "--quiet", *sets]  # fmt: skip
    env = {**os.environ, "ZOO_AVAILABLE_MEMORY": "unlimited"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    print(f"  {process.stdout.read().strip()} (exit {os.waitstatus_to_exitcode(status)})", flush=True)
    return usage.ru_maxrss * 1024  # kilobytes on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--speed-steps", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for shape in args.shapes:
        name, overrides = SHAPES[shape]
        recipe = ROOT / "recipes" / name
        print(f"{shape}:", flush=True)
        guess = estimate(recipe, overrides, args.speed_steps > 0)
        with tempfile.TemporaryDirectory() as folder:
            peak = measured(recipe, overrides, args.steps, args.speed_steps, Path(folder) / "report")
        rows.append((shape, guess, peak))
    print(f"\n{'shape':<10} {'estimate GB':>12} {'measured GB':>12} {'ratio':>7}")
    for shape, guess, peak in rows:
        print(f"{shape:<10} {guess / 2**30:>12.2f} {peak / 2**30:>12.2f} {guess / peak:>7.2f}")
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB)")


if __name__ == "__main__":
    main()
