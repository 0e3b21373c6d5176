"""Data parallel scaling on CPU: 2 replicas against 1 at the same global batch (issue 18, item 5).

Each run is a fresh ``zoo train`` process (``python -m zoo.cli train RECIPE --set ...``), the
way tests/test_distributed.py sets data parallelism up on a CPU:

  lightning 1x1   one process, one kernel thread (trainer.num_threads=1)
  lightning ddp   trainer.strategy=ddp, trainer.devices=2: two processes (gloo), one thread each
  keras 1x1       one replica, one thread (intra- and inter-op pools of 1)
  keras mirrored  trainer.strategy=mirrored, trainer.devices=2: one process, two logical CPU
                  devices, two threads (TensorFlow's thread pools are per process: with one
                  thread the two replicas would take turns on it)
  keras workers   trainer.num_nodes=2: two ``zoo train`` processes with a TF_CONFIG each
                  (MultiWorkerMirroredStrategy over localhost), one thread each
  lightning 1x2, keras 1x2 (``--reference``): one device, two threads, what else two cores buy

``data.batch_size`` is the global batch in zoo (each of 2 replicas gets half), so every mode
takes the same optimizer steps on the same samples. ``data.val_fraction=0``: an epoch's time
(``metrics.csv`` ``epoch_seconds``, the framework's own clock from epoch start to epoch end)
is training only. Samples/s is the training split's size over the fastest epoch after the
first (warm-up, tracing), over ``--rounds`` interleaved rounds (modes in turn within a
round): on a shared machine other work only ever slows a run down. The ratio is a mode's
samples/s over the 1x1 run of its framework.

Equality: each mode's exported checkpoint (safetensors) against the 1x1 run's of the same
framework, the largest |difference| over every tensor, and the differences of the last
epoch's training loss and of the test loss. Where the model has BatchNorm (resnet18) two
replicas normalise each half batch by its own statistics (neither framework syncs them by
default): the runs differ by design, not by rounding.

    .venv/bin/python bench/data_parallel.py [--presets resnet18,gpt2-micro,convnet-tiny] [--rounds 2]
        [--epochs 3] [--reference] [--write-results]
    .venv/bin/python bench/data_parallel.py --quick      # convnet-tiny, two modes each, ~40 s
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's zoo, whichever one the environment installed
from results_section import write_section  # noqa: E402  (bench/ is the script's folder)

from zoo.runs.launch import free_ports  # noqa: E402

SECTION = "## Data parallel scaling on CPU (`bench/data_parallel.py`)"
NO_DROPOUT = ["model.resid_dropout=0", "model.embd_dropout=0", "model.attn_dropout=0"]
# Each preset: a shipped recipe and what the bench changes in it (besides the common settings).
# The test share is chosen so that the training split ends in an even batch: two replicas
# average their own means (DDP averages gradients, tf.distribute divides each replica's mean
# by the replicas), so an odd last batch (15 and 14 samples) weighs its samples unequally, a
# real difference from one device, not rounding.
PRESETS: dict[str, dict] = {
    "resnet18": {
        "recipe": "recipes/resnet18-digits32-0to4.yaml",
        "set": ["data.test_fraction=0.05"],
        "what": "digits 0-4 as 32x32 RGB PNGs, Adam, batch 64",
    },
    # Dropout off: each process draws its own masks, which would make the runs differ anyway.
    "gpt2-micro": {
        "recipe": "recipes/gpt2-micro-pydocs.yaml",
        "set": ["data.test_fraction=0.1", *NO_DROPOUT],
        "what": "pydocs, BPE 4096, seq 128, AdamW, batch 32, dropout 0",
    },
    # 64 images of each digit (8x8 PNGs, one channel): 20 even batches. SGD with momentum.
    "convnet-tiny": {
        "recipe": "recipes/cnn-digits.yaml",
        "set": [
            "model.architecture=convnet-tiny",
            "data.name=image_folder",
            "data.image_size=8",
            "data.channels=grayscale",
            "data.train_per_class=64",
            "optimizer.name=sgd",
            "optimizer.lr=0.2",
            "optimizer.momentum=0.9",
        ],
        "what": "8x8 digit PNGs, 640 samples, SGD, batch 32",
    },
}
# mode -> (framework, overrides, how it is launched)
MODES: dict[str, tuple[str, list[str], str]] = {
    "lightning 1x1": ("lightning", ["trainer.num_threads=1"], "one"),
    "lightning ddp": (
        "lightning",
        ["trainer.num_threads=1", "trainer.strategy=ddp", "trainer.devices=2"],
        "one",
    ),
    "lightning 1x2": ("lightning", ["trainer.num_threads=2"], "one"),
    "keras 1x1": ("keras", ["trainer.num_threads=1"], "one"),
    "keras mirrored": (
        "keras",
        ["trainer.num_threads=2", "trainer.strategy=mirrored", "trainer.devices=2"],
        "one",
    ),
    "keras workers": ("keras", ["trainer.num_threads=1", "trainer.num_nodes=2"], "workers"),
    "keras 1x2": ("keras", ["trainer.num_threads=2"], "one"),
}
WHAT = {
    "1x1": "1 process x 1 thread",
    "ddp": "DDP (gloo), 2 processes x 1 thread",
    "mirrored": "MirroredStrategy, 1 process, 2 replicas, 2 threads",
    "workers": "MultiWorkerMirrored, 2 processes x 1 thread",
    "1x2": "1 process x 2 threads (reference)",
}
PREAMBLE = """```bash
.venv/bin/python bench/data_parallel.py --reference --write-results   # 3 presets x 7 modes x 2 rounds
.venv/bin/python bench/data_parallel.py --quick                       # convnet-tiny, 4 runs, ~45 s
```

`zoo train` in a fresh process per run, float32, the same global batch (`data.batch_size`) with
1 device and with 2, one kernel thread per process (`trainer.num_threads=1`), except
MirroredStrategy (one process holding both replicas: `trainer.num_threads=2`) and the
`1 process x 2 threads` reference rows. `data.val_fraction=0`: an epoch's clock
(`metrics.csv` `epoch_seconds`) is training only. samples/s: training samples over the fastest
epoch after the first; ratio: over the 1x1 run of the same framework. max |Δ| checkpoint: the
largest difference over every tensor of the exported safetensors against that 1x1 run;
|Δ| last train loss: the last epoch's mean training loss; |Δ| test loss: the test split's.
"""
MAIN_MODES = ["lightning 1x1", "lightning ddp", "keras 1x1", "keras mirrored", "keras workers"]
REFERENCE_MODES = ["lightning 1x2", "keras 1x2"]
QUICK_MODES = ["lightning 1x1", "lightning ddp", "keras 1x1", "keras mirrored"]
TIMEOUT_S = 900


def train(preset: str, mode: str, epochs: int, folder: Path, name: str) -> Path:
    """One run of ``mode`` on ``preset`` in fresh process(es); returns its run folder."""
    spec = PRESETS[preset]
    framework, overrides, launch = MODES[mode]
    settings = [
        f"export.dir={folder}",
        f"export.run_name={name}",
        f"trainer.framework={framework}",
        f"trainer.max_epochs={epochs}",
        "trainer.progress_bar=false",
        "data.val_fraction=0",
        *spec["set"],
        *overrides,
    ]
    command = [sys.executable, "-m", "zoo.cli", "train", str(ROOT / spec["recipe"])]
    command += [a for s in settings for a in ("--set", s)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ZOO_DDP_TIMEOUT_S": "300", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if launch == "one":
        envs = [env]
    else:  # two workers on this machine, as a cluster launcher would start them
        cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
        envs = [
            {**env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
            for i in range(2)
        ]
    processes = [
        subprocess.Popen(command, env=e, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for e in envs
    ]
    try:
        done = [(p.wait(timeout=TIMEOUT_S), *p.communicate()) for p in processes]
    finally:
        for process in processes:  # never leave a worker behind, whatever happened
            if process.poll() is None:
                process.kill()
                process.wait()
    for code, _, stderr in done:
        if code:
            raise RuntimeError(f"{preset} {mode} failed ({code}):\n{stderr[-3000:]}")
    return folder / name


def read_run(run: Path) -> dict:
    """What a run recorded: every epoch's seconds and training loss, the test metrics."""
    from zoo.metrics_file import read_metrics

    rows = read_metrics(run / "metrics.csv")
    summary = json.loads((run / "summary.json").read_text())["metrics"]
    return {
        "epoch_seconds": [float(r["epoch_seconds"]) for r in rows],
        "train_loss": float(rows[-1]["train_loss"]),
        "test_loss": float(summary["test_loss"]),
        "replicas": int(summary["replicas"]),
    }


def train_samples(preset: str) -> tuple[int, int]:
    """The training split's size, as ``zoo train`` loads it (with the bench's settings), and
    the global batch."""
    from zoo import registry
    from zoo.data import load_dataset
    from zoo.recipe import load_recipe

    spec = PRESETS[preset]
    recipe = load_recipe(ROOT / spec["recipe"], ["data.val_fraction=0", *spec["set"]])
    kind = registry.get_family(recipe.model.architecture).input_kind
    return len(load_dataset(recipe.data, kind).train), recipe.data.batch_size


def max_difference(a: dict, b: dict) -> float:
    import numpy as np

    if a.keys() != b.keys():
        raise RuntimeError(f"checkpoints differ in tensors: {sorted(a.keys() ^ b.keys())[:5]}")
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) for k in a)


def measure(
    presets: list[str], modes: list[str], epochs: int, rounds: int, keep: Path | None = None
) -> list[dict]:
    """Every mode on every preset, ``rounds`` interleaved rounds; one dict per preset and mode.
    ``keep``: run folders go there, and a run already finished there is read, not trained
    again (a long measurement cut short goes on where it stopped)."""
    from safetensors.numpy import load_file

    results = []
    with tempfile.TemporaryDirectory(prefix="zoo-data-parallel-") as temporary:
        scratch = keep or Path(temporary)
        for preset in presets:
            samples, batch = train_samples(preset)
            seconds: dict[str, list[float]] = {m: [] for m in modes}
            runs: dict[str, dict] = {}
            tensors: dict[str, dict] = {}
            for index in range(rounds):
                for mode in modes:
                    print(f"{preset} {mode} round {index + 1}/{rounds}", file=sys.stderr, flush=True)
                    name = f"{preset}-{mode.replace(' ', '-')}-{index}"
                    if keep is not None and (keep / name / "summary.json").is_file():
                        run = keep / name
                    else:
                        shutil.rmtree(scratch / name, ignore_errors=True)
                        run = train(preset, mode, epochs, scratch, name)
                    record = read_run(run)
                    seconds[mode] += record["epoch_seconds"][1:]  # the first epoch is warm-up
                    if index == 0:  # every round trains the same: the first round's results
                        runs[mode], tensors[mode] = record, load_file(run / "model.safetensors")
            for mode in modes:
                framework = MODES[mode][0]
                base = f"{framework} 1x1"
                record = runs[mode]
                entry = {
                    "preset": preset,
                    "mode": mode,
                    "framework": framework,
                    "samples": samples,
                    "batch": batch,
                    "even": samples % batch % 2 == 0,
                    "replicas": record["replicas"],
                    "best_epoch_s": min(seconds[mode]),
                    "samples_per_s": samples / min(seconds[mode]),
                    "train_loss": record["train_loss"],
                    "test_loss": record["test_loss"],
                }
                if base in runs:
                    entry["max_abs_weight_diff"] = max_difference(tensors[base], tensors[mode])
                    entry["train_loss_diff"] = abs(record["train_loss"] - runs[base]["train_loss"])
                    entry["test_loss_diff"] = abs(record["test_loss"] - runs[base]["test_loss"])
                if base in runs:
                    entry["ratio"] = entry["samples_per_s"] * min(seconds[base]) / samples
                results.append(entry)
    return results


def table(results: list[dict]) -> str:
    lines = [
        "| preset | framework | mode | replicas | samples/s | ratio to 1x1 | max \\|Δ\\| checkpoint "
        "| \\|Δ\\| last train loss | \\|Δ\\| test loss |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in results:
        what = WHAT[e["mode"].split()[1]]
        same = e["mode"].endswith("1x1")
        diffs = (
            ("(itself)",) * 3
            if same
            else tuple(
                f"{e[k]:.2g}" if k in e else "-"
                for k in ("max_abs_weight_diff", "train_loss_diff", "test_loss_diff")
            )
        )
        lines.append(
            f"| {e['preset']} | {e['framework']} | {what} | {e['replicas']} | {e['samples_per_s']:.0f} "
            f"| {e.get('ratio', float('nan')):.2f} | {' | '.join(diffs)} |"
        )
    lines.append("")
    for preset in dict.fromkeys(e["preset"] for e in results):
        e = next(e for e in results if e["preset"] == preset)
        split = "every batch splits evenly" if e["even"] else "the last batch splits UNEVENLY"
        lines.append(
            f"- {preset}: {PRESETS[preset]['what']}; {e['samples']} training samples, global batch "
            f"{e['batch']} ({split}); `--set` {', '.join(f'`{s}`' for s in PRESETS[preset]['set'])}"
        )
    return "\n".join(lines)


def machine() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return f"{date.today()}, commit {commit.stdout.strip()}, {os.cpu_count()} cores; `uptime`: {uptime}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--presets", default="resnet18,gpt2-micro,convnet-tiny", help=f"from {', '.join(PRESETS)}"
    )
    parser.add_argument("--modes", help=f"comma-separated (default: {', '.join(MAIN_MODES)})")
    parser.add_argument("--reference", action="store_true", help="also 1 process x 2 threads")
    parser.add_argument("--epochs", type=int, default=3, help="per run; the first is warm-up")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="convnet-tiny, 2 epochs, 1 round, no workers")
    parser.add_argument("--json", action="store_true", help="one JSON line per preset and mode")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the runs in bench/out/data_parallel/ and reuse finished ones",
    )
    parser.add_argument("--write-results", action="store_true", help="rewrite this section of RESULTS.md")
    args = parser.parse_args()
    if args.quick:
        presets, modes, epochs, rounds = ["convnet-tiny"], QUICK_MODES, 2, 1
    else:
        presets, epochs, rounds = args.presets.split(","), args.epochs, args.rounds
        modes = (
            args.modes.split(",") if args.modes else MAIN_MODES + (REFERENCE_MODES if args.reference else [])
        )
    unknown = [p for p in presets if p not in PRESETS] + [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown {unknown}; presets: {', '.join(PRESETS)}; modes: {', '.join(MODES)}")
    if epochs < 2:
        parser.error("--epochs must be at least 2: the first is warm-up")
    load_before, started = machine(), time.perf_counter()
    keep = ROOT / "bench" / "out" / "data_parallel" if args.keep else None
    results = measure(presets, modes, epochs, rounds, keep)
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "data_parallel.jsonl").write_text("".join(json.dumps(e) + "\n" for e in results))
    if args.json:
        for entry in results:
            print(json.dumps(entry))
        return
    text = PREAMBLE + "\n" + table(results)
    text += (
        f"\n\nfastest epoch after the first of {epochs} per run, {rounds} interleaved round(s); "
        f"{time.perf_counter() - started:.0f} s in all. Before: {load_before}. "
        f"After: `uptime`: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"
    )
    print(text)
    if args.write_results:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
