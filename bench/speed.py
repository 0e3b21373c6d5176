"""Does zoo cost anything over a hand-written loop? Throughput side by side, one run.

For the digits recipe of every family (its small preset), five ways to train the same
model on the same data at the same batch size, one thread each (stable figures on a
noisy 2-core machine), each in a fresh process:

  raw-torch       model(x), loss, backward, step over zoo's batch order (no Lightning)
  zoo-lightning   zoo train --framework lightning (progress bar and per-epoch metrics on)
  lightning-floor zoo's LightningModule and loader in Trainer(barebones=True), no callbacks:
                  what Lightning itself costs, so the gap splits into Lightning's and zoo's
  plain-keras     model.compile + model.fit on the numpy arrays
  zoo-keras       zoo train --framework keras

Samples/s is each way's fastest epoch after the first (warm-up, tracing) over ``--rounds``
runs, interleaved: on this shared machine, other work only ever slows a run down, by tens
of percent for seconds to minutes, so the fastest epoch is the closest to the way's own
cost (timeit's reasoning); a median moved with whichever way ran in a slow minute.
Validation is off, so an epoch is training only.

Also timed: `zoo list/show/validate` start-up (the common checkpoint's throughput is
bench/checkpoint_io.py's). Ends with the worst ratio.

    .venv/bin/python bench/speed.py [--epochs 6] [--rounds 5] [--batch-size N]
                                    [--families cnn,rnn,...]  (default: every family)
                                    [--write-results]  (its section of bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from zoo.progress import bar

ROOT = Path(__file__).resolve().parent.parent


def digits_recipes() -> dict[str, Path]:
    """Each registered family's shipped digits recipe (``recipes/*-digits.yaml``), in the
    registry's order; a family without one is left out, and said so."""
    import yaml

    from zoo import registry

    found: dict[str, Path] = {}
    for path in sorted((ROOT / "recipes").glob("*-digits.yaml")):
        architecture = yaml.safe_load(path.read_text())["model"]["architecture"]
        found.setdefault(registry.get_family(architecture).name, path)
    missing = [name for name in registry.families() if name not in found]
    if missing:
        print(f"no recipes/*-digits.yaml for: {', '.join(missing)}", file=sys.stderr)
    return {name: found[name] for name in registry.families() if name in found}


HEADING = "## Speed: zoo against hand-written loops (`bench/speed.py`)"
PREAMBLE = """```bash
make bench                                               # every table, this one included
.venv/bin/python bench/speed.py --write-results          # this table alone
```

The digits recipe of every family (its small preset) at its own batch size, one thread,
validation off; samples/s of the fastest epoch after the first over interleaved rounds of
fresh processes. *lightning floor* is zoo's own LightningModule and loader in
`Trainer(barebones=True)` with no callbacks: what Lightning itself costs.
"""
WAYS = ("raw-torch", "zoo-lightning", "lightning-floor", "plain-keras", "zoo-keras")


def overrides(epochs: int, batch_size: int | None) -> list[str]:
    return [
        f"trainer.max_epochs={epochs}", "trainer.num_threads=1", "data.val_fraction=0",
        "trainer.progress_bar=true", "export.dir=bench/out/runs",
        *([f"data.batch_size={batch_size}"] if batch_size else []),
    ]  # fmt: skip


def measure(way: str, family: str, epochs: int, batch_size: int | None) -> dict:
    """Runs in a fresh process: one way of training, epoch times in seconds."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import zoo
    from zoo import registry
    from zoo.data import load_dataset

    recipe = zoo.load_recipe(digits_recipes()[family], overrides(epochs, batch_size))
    fam = registry.get_family(recipe.model.architecture)
    data = load_dataset(recipe.data, fam.input_kind)
    config = recipe.model.bind(data.info)
    if way.startswith("zoo-"):
        result = zoo.train(recipe, way.removeprefix("zoo-"))
        times = [float(r["epoch_seconds"]) for r in result.history]
    elif way == "raw-torch":
        times = raw_torch(recipe, fam, config, data, epochs)
    elif way == "lightning-floor":
        times = lightning_floor(recipe, fam, config, data, epochs)
    else:
        times = plain_keras(recipe, fam, config, data, epochs)
    return {"times": times, "samples": len(data.train)}


def raw_torch(recipe, family, config, data, epochs: int) -> list[float]:
    import torch
    import torch.nn.functional as F

    from zoo.data import epoch_batches, steps_per_epoch
    from zoo.lightning.optim import build_optimizer, build_scheduler
    from zoo.schedule import lr_table

    torch.set_num_threads(1)
    torch.manual_seed(recipe.trainer.seed)
    model = family.build_torch(config).train()
    table = lr_table(
        recipe.schedule, recipe.optimizer.lr, steps_per_epoch(len(data.train), recipe.data.batch_size), epochs
    )
    optimizer = build_optimizer(recipe.optimizer, model.parameters())
    scheduler = build_scheduler(optimizer, table, recipe.optimizer.lr)
    x, y = torch.from_numpy(data.train.x), torch.from_numpy(data.train.y)
    times = []
    for epoch in range(epochs):
        started = time.perf_counter()
        for index in epoch_batches(len(y), recipe.data.batch_size, recipe.trainer.seed, epoch):
            index = torch.from_numpy(index)
            loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
        times.append(time.perf_counter() - started)
    return times


def lightning_floor(recipe, family, config, data, epochs: int) -> list[float]:
    import lightning as L
    import torch

    from zoo.data import steps_per_epoch
    from zoo.lightning.data import loader
    from zoo.lightning.task import TASKS
    from zoo.schedule import lr_table

    torch.set_num_threads(1)
    torch.manual_seed(recipe.trainer.seed)
    batches = steps_per_epoch(len(data.train), recipe.data.batch_size)
    table = lr_table(recipe.schedule, recipe.optimizer.lr, batches, epochs)
    task = TASKS[data.task](family.build_torch(config), recipe.optimizer, table)
    times: list[float] = []

    class Timer(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            self.started = time.perf_counter()

        def on_train_epoch_end(self, trainer, module):
            times.append(time.perf_counter() - self.started)

    trainer = L.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, barebones=True, callbacks=[Timer()],
        use_distributed_sampler=False,
    )  # fmt: skip
    trainer.fit(task, loader(data.train, recipe.data.batch_size, recipe.trainer.seed, recipe.data.shuffle))
    return times


def plain_keras(recipe, family, config, data, epochs: int) -> list[float]:
    import keras
    import tensorflow as tf

    from zoo.keras.data import keras_layout

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(recipe.trainer.seed)
    model = family.build_keras(config)
    model.compile(
        optimizer=keras.optimizers.Adam(recipe.optimizer.lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.started)

    x = keras_layout(data.train.x, family.input_kind)
    model.fit(
        x, data.train.y, batch_size=recipe.data.batch_size, epochs=epochs, verbose=0, callbacks=[Timer()]
    )
    return times


def run_one(way: str, family: str, epochs: int, batch_size: int | None) -> dict:
    command = [sys.executable, __file__, "--one", way, "--families", family, "--epochs", str(epochs)]
    command += ["--batch-size", str(batch_size)] if batch_size else []
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"{way} {family} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def samples_per_second(result: dict) -> float:
    return result["samples"] / min(result["times"][1:])


def startup() -> dict[str, float]:
    zoo_cli = str(ROOT / ".venv" / "bin" / "zoo") if (ROOT / ".venv/bin/zoo").exists() else "zoo"
    timings = {}
    for args in (["list"], ["show", "resnet-8"], ["validate", "recipes/cnn-digits.yaml"]):
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            subprocess.run([zoo_cli, *args], capture_output=True, check=True, cwd=ROOT)
            runs.append(time.perf_counter() - started)
        timings["zoo " + " ".join(args)] = statistics.median(runs)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, help="instead of each recipe's own")
    parser.add_argument("--families", help="comma-separated (default: every registered family)")
    parser.add_argument("--write-results", action="store_true", help="rewrite this section of RESULTS.md")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.families, args.epochs, args.batch_size)))
        return
    lines = [
        "| family | batch | raw torch | zoo lightning | ratio | lightning floor | ratio "
        "| plain keras | zoo keras | ratio | lightning/keras |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst, started = [], time.perf_counter()
    families = args.families.split(",") if args.families else list(digits_recipes())
    # A round of every family takes minutes (3.4 at --epochs 4): a bar on stderr says how far it is.
    shown = bar(len(families) * args.rounds * len(WAYS), "bench", unit="run")
    for family in families:
        rounds = []
        for _ in range(args.rounds):
            measured = {}
            for way in WAYS:
                shown.set_postfix_str(f"{family} {way}")
                measured[way] = samples_per_second(run_one(way, family, args.epochs, args.batch_size))
                shown.update(1)
            rounds.append(measured)
        speed = {way: max(r[way] for r in rounds) for way in WAYS}
        lightning = speed["zoo-lightning"] / speed["raw-torch"]
        floor = speed["lightning-floor"] / speed["raw-torch"]
        keras = speed["zoo-keras"] / speed["plain-keras"]
        cross = speed["zoo-lightning"] / speed["zoo-keras"]
        worst += [(lightning, f"{family} lightning"), (keras, f"{family} keras")]
        batch = args.batch_size or zoo_batch_size(family)
        cells = [family, batch, *(f"{speed[w]:.0f}" for w in WAYS[:2]), f"{lightning:.2f}"]
        cells += [f"{speed['lightning-floor']:.0f}", f"{floor:.2f}"]
        cells += [*(f"{speed[w]:.0f}" for w in WAYS[3:]), f"{keras:.2f}", f"{cross:.2f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    shown.close()
    lines.append(
        f"\nsamples/s: the fastest epoch (2-{args.epochs}) of {args.rounds} interleaved rounds; "
        f"1 thread, validation off; {(time.perf_counter() - started) / 60:.0f} min, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    low = min(worst)
    lines.append(f"\nworst zoo / hand-written ratio: {low[0]:.3f} ({low[1]})")
    lines.append("\n| start-up (median of 5) | seconds |\n|---|---|")
    lines += [f"| `{k}` | {v:.3f} |" for k, v in startup().items()]
    text = "\n".join(lines)
    print(text)
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed.md").write_text(text + "\n")
    if args.write_results:
        sys.path.insert(0, str(ROOT / "bench"))
        from results_section import write_section

        write_section(HEADING, PREAMBLE + "\n" + text)


def zoo_batch_size(family: str) -> int:
    import yaml

    return yaml.safe_load(digits_recipes()[family].read_text())["data"]["batch_size"]


if __name__ == "__main__":
    main()
