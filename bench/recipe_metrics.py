"""The README's table of shipped recipes: every recipe trained by ``zoo train`` in both
frameworks, each run in a fresh process as a user would start it, and its test metric.

``--no-dropout`` sets every dropout field to 0 and turns on ``trainer.deterministic``:
then the two frameworks share everything but kernel rounding (the same initial tensors,
batches, learning rates and optimizer arithmetic), which is what the second table of the
README shows.

Each run's time is printed beside its metric: the whole ``zoo train`` command (imports, data,
training, export) and its training alone (summary.json's ``train_seconds``), with
``ZOO_NUM_THREADS`` set to the machine's cores so that a figure does not follow the load at the
moment it started (zoo's default thread count does).

Run: ``python bench/recipe_metrics.py [--no-dropout] [recipes/x.yaml ...]`` (the whole
set took about 15 minutes on 2 cores before the pydocs and image-folder recipes joined it; the
character LMs are most of that).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo.recipe import data_task, load_recipe  # noqa: E402

FRAMEWORKS = ("lightning", "keras")
METRICS = {
    "classification": ("test_accuracy", "accuracy {:.4f}"),
    "language_modeling": ("test_bpc", "{:.3f} bits per character"),
    "language_modeling, tokens": ("test_bpt", "{:.3f} bits per token"),  # a BPE model's (not characters)
    "masked_language_modeling": ("test_accuracy", "masked-token accuracy {:.4f}"),
}


def overrides(path: Path, no_dropout: bool) -> list[str]:
    found = ["trainer.progress_bar=false"]
    if no_dropout:
        model = load_recipe(path).model
        found += [f"model.{name}=0" for name in type(model).model_fields if "dropout" in name]
        found.append("trainer.deterministic=true")
    return found


def train(path: Path, framework: str, sets: list[str], out: Path) -> dict[str, float]:
    """The run's test metrics, with ``command_seconds``: the whole ``zoo train`` process."""
    command = [str(Path(sys.executable).with_name("zoo")), "train", str(path), "--framework", framework]
    for item in [*sets, f"export.dir={out}"]:
        command += ["--set", item]
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "ZOO_NUM_THREADS": str(os.cpu_count()), **os.environ}
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=ROOT, capture_output=True)
    seconds = time.perf_counter() - started
    summaries = sorted(out.glob(f"*-{framework}-*/summary.json"), key=lambda p: p.stat().st_mtime)
    return {**json.loads(summaries[-1].read_text())["metrics"], "command_seconds": seconds}


def timing(result: dict[str, float]) -> str:
    """``whole s (training s)``."""
    return f"{result['command_seconds']:.0f} s ({result['train_seconds']:.0f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-dropout", action="store_true", help="dropout 0 and deterministic kernels")
    parser.add_argument("recipes", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.recipes or sorted((ROOT / "recipes").glob("*.yaml"))
    print(f"On {os.cpu_count()} cores; time: the whole `zoo train` command (its training alone).")
    print("| recipe | model | test metric, Lightning | Keras | difference | time, Lightning | Keras |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        recipe = load_recipe(path)
        with tempfile.TemporaryDirectory() as tmp:
            sets = overrides(path, args.no_dropout)
            results = {fw: train(path, fw, sets, Path(tmp) / fw) for fw in FRAMEWORKS}
        task = data_task(recipe.data)
        key, form = METRICS[task]
        if key not in results[FRAMEWORKS[0]]:
            key, form = METRICS[f"{task}, tokens"]
        values = [results[fw][key] for fw in FRAMEWORKS]
        cells = [form.format(v) for v in values]
        name, model = f"`{path.name}`", recipe.model.preset or recipe.model.architecture
        times = " | ".join(timing(results[fw]) for fw in FRAMEWORKS)
        difference = values[1] - values[0]
        print(f"| {name} | {model} | {cells[0]} | {cells[1]} | {difference:+.4f} | {times} |", flush=True)


if __name__ == "__main__":
    main()
