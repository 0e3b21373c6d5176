"""The peak memory zoo estimates before a comparison or a training run, against the peak a real one reaches.

Each shape runs ``zoo compare`` (or ``zoo train``: ``--train lightning|keras``) in a subprocess of
its own (the frameworks' libraries count in its resident size, as they do for a user) and reads
its peak resident set size from ``ru_maxrss``; the estimate is zoo.peak_memory's, computed
before anything is built, as zoo.plan makes it. Prints one row per shape with estimate /
measured; the target is within 30 %, never under.

    .venv/bin/python bench/memory_estimate.py [--shapes gpt2 bert-base resnet50] [--steps 1]
        [--forward-only] [--set model.n_layer=4] [--cap 9] [--estimate-only]
        [--train keras] [--eval-examples 16]

A ``--train`` row is one whole ``zoo train`` of the shape, kept short (zoo train has no step
limit; 20-100 s a row on this 2-core machine): one epoch over TRAIN_EXAMPLES of the shape's own
data (four steps at batch 2), a validation pass and the test pass over ``--eval-examples`` each
(in one batch of data.eval_batch_size, 512 by default, unless set lower), the training state
saved at the epoch's end, and the checkpoint exported: every part of a run that makes its peak.
Text rows write the first windows (or a round of each class's paragraphs) to a file under a
temporary folder with the tokenizer of the shape's whole data, so the model is the one a full
run trains; the image row keeps two training images a class (five steps) and carves the
evaluation splits as a share.

A watchdog polls the run's resident size every 0.2 s and kills it past ``--cap`` GB
(default 9), so a shape too large for a shared machine is stopped before the kernel would
kill something else: its row then says ">= cap" (a lower bound). Run one shape at a time.
"""

from __future__ import annotations

import argparse
import csv
import itertools
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
TRAIN_EXAMPLES = 8  # a --train row's training set: four steps at the shapes' batch of 2


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


def train_estimate(recipe: Path, overrides: list[str]) -> int:
    """``zoo train``'s estimate, as zoo.plan makes it: the config bound to the data, one batch."""
    from zoo import model_memory, peak_memory, registry
    from zoo.data import load_dataset
    from zoo.recipe import load_recipe

    loaded = load_recipe(recipe, overrides)
    family = registry.get_family(loaded.model.architecture)
    dataset = load_dataset(loaded.data, family.input_kind)
    config = loaded.model.bind(dataset.info)
    print(f"  data: {len(dataset.train)} training, {len(dataset.val)} validation, {len(dataset.test)} test "
          f"examples; {config.architecture} with {model_memory.parameter_bytes(family, config) // 4:,} "
          "parameters", flush=True)  # fmt: skip
    estimate = peak_memory.training_estimator(loaded, family, config, dataset, fine_tune=False)
    found = estimate(loaded.data.batch_size, loaded.data.eval_batch_size)
    print(f"  estimate: {found.describe()}", flush=True)
    return found.total


def short_data(recipe: Path, overrides: list[str], folder: Path, eval_examples: int) -> list[str]:
    """Overrides that make a ``zoo train`` row short (it has no step limit): one epoch over
    TRAIN_EXAMPLES of the shape's data, validation and test over about ``eval_examples`` each,
    written under ``folder``. Text keeps the tokenizer of the shape's whole data (saved there),
    so the model and its vocabulary are the ones a full run trains."""
    from zoo import registry
    from zoo.data import load_dataset
    from zoo.recipe import load_recipe

    loaded = load_recipe(recipe, overrides)
    data = loaded.data
    dataset = load_dataset(data, registry.get_family(loaded.model.architecture).input_kind)
    sets = ["trainer.max_epochs=1"]
    if dataset.tokenizer is not None:
        dataset.tokenizer.save(folder)
        sets.append(f"data.tokenizer={folder / 'tokenizer.json'}")
    share = eval_examples / (TRAIN_EXAMPLES + 2 * eval_examples)
    if data.name == "text":  # the first windows of its text, split by position
        windows = TRAIN_EXAMPLES + 2 * eval_examples + 1
        text = dataset.tokenizer.decode(dataset.train.x[:windows].reshape(-1))
        (folder / "text.txt").write_text(text, encoding="utf-8")
        share = (eval_examples + 0.5) / windows
        sets.append(f"data.path={folder / 'text.txt'}")
    elif data.name == "text_classification":  # a round of each class's paragraphs at a time
        from zoo.data.text_classification import embedded_examples

        examples = embedded_examples()
        by_class = [
            [i for i, n in enumerate(examples.labels) if n == label] for label in set(examples.labels)
        ]
        rows = [i for one in itertools.zip_longest(*by_class) for i in one if i is not None]
        with open(folder / "labelled.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            for i in rows[: TRAIN_EXAMPLES + 2 * eval_examples]:
                writer.writerow([examples.texts[i], examples.classes[examples.labels[i]]])
        sets.append(f"data.path={folder / 'labelled.csv'}")
    elif data.name == "image_folder":  # a few training images of each class, carved splits as a share
        classes = dataset.info["num_classes"]
        share = eval_examples / (len(dataset.train) + len(dataset.val) + len(dataset.test))
        sets.append(f"data.train_per_class={-(-TRAIN_EXAMPLES // classes)}")
    else:
        raise SystemExit(f"--train: no short data for data.name {data.name!r}")
    return [*sets, f"data.val_fraction={share:.6f}", f"data.test_fraction={share:.6f}"]


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
    parser.add_argument("--train", choices=["lightning", "keras"], help="zoo train in this framework instead")
    parser.add_argument(
        "--eval-examples", type=int, default=16, help="--train: examples in each of validation and test"
    )
    args = parser.parse_args()
    rows = []
    for shape in args.shapes:
        name, overrides = SHAPES[shape]
        overrides = [*overrides, *args.extra]
        recipe = ROOT / "recipes" / name
        words = ["forward-only"] if args.forward_only else [f"train {args.train}"] if args.train else []
        if args.train and args.eval_examples != parser.get_default("eval_examples"):
            words.append(f"eval-examples {args.eval_examples}")
        label = " ".join([shape, *args.extra, *words])
        print(f"{label}:", flush=True)
        with tempfile.TemporaryDirectory() as folder:
            if args.train:
                overrides = [*overrides, f"trainer.framework={args.train}", f"export.dir={folder}"]
                overrides += short_data(recipe, overrides, Path(folder), args.eval_examples)
                guess = train_estimate(recipe, overrides)
                command = [sys.executable, "-m", "zoo.cli", "train", str(recipe), "--quiet"]
            else:
                guess = estimate(recipe, overrides, not args.forward_only)
                command = [sys.executable, "-m", "zoo.cli", "compare", str(recipe), "--steps",
                           str(args.steps), "--speed-steps", str(args.speed_steps), "--out",
                           str(Path(folder) / "report"), "--quiet",
                           *(["--forward-only"] if args.forward_only else [])]  # fmt: skip
            if args.estimate_only:
                rows.append((label, guess, None, False))
                continue
            command += [word for o in overrides for word in ("--set", o)]
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
