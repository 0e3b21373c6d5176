"""Does zoo cost anything over a hand-written loop? Throughput side by side, one run.

For the digits recipe of every family (its small preset), four ways to train the same
model on the same data at the same batch size, one thread each (stable figures on a
noisy 2-core machine), each in a fresh process:

  raw-torch     model(x), loss, backward, step over zoo's batch order (no Lightning)
  zoo-lightning zoo train --framework lightning (progress bar and per-epoch metrics on)
  plain-keras   model.compile + model.fit on the numpy arrays
  zoo-keras     zoo train --framework keras

Samples/s is the median over epochs after the first (warm-up, tracing). Validation is off
for all four so an epoch is training only. Also timed: `zoo list/show/validate` start-up,
and safetensors save/load of a ~100M-parameter checkpoint. Ends with the worst ratio.

    .venv/bin/python bench/speed.py [--epochs 5] [--families cnn,rnn,lstm,transformer]
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

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {f: ROOT / "recipes" / f"{f}-digits.yaml" for f in ("cnn", "rnn", "lstm", "transformer")}


def overrides(epochs: int) -> list[str]:
    return [
        f"trainer.max_epochs={epochs}", "trainer.num_threads=1", "data.val_fraction=0",
        "trainer.progress_bar=true", "export.dir=bench/out/runs",
    ]  # fmt: skip


def measure(way: str, family: str, epochs: int) -> dict:
    """Runs in a fresh process: one way of training, epoch times in seconds."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import zoo
    from zoo import registry
    from zoo.data import load_dataset

    recipe = zoo.load_recipe(RECIPES[family], overrides(epochs))
    fam = registry.get_family(recipe.model.architecture)
    data = load_dataset(recipe.data, fam.input_kind)
    config = recipe.model.bind(data.info)
    if way.startswith("zoo-"):
        result = zoo.train(recipe, way.removeprefix("zoo-"))
        times = [float(r["epoch_seconds"]) for r in result.history]
    elif way == "raw-torch":
        times = raw_torch(recipe, fam, config, data, epochs)
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


def run_one(way: str, family: str, epochs: int) -> dict:
    command = [sys.executable, __file__, "--one", way, "--families", family, "--epochs", str(epochs)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"{way} {family} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def samples_per_second(result: dict) -> float:
    return result["samples"] / statistics.median(result["times"][1:])


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


def checkpoint_io() -> dict[str, float]:
    """Save and load of ~100M float32 parameters through safetensors, from the page cache."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    tensors = {
        f"layer{i}.weight": np.random.default_rng(i).normal(size=(2500, 4000)).astype(np.float32)
        for i in range(10)
    }
    size = sum(t.nbytes for t in tensors.values())
    path = ROOT / "bench" / "out" / "io.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))  # warm the page cache
    started = time.perf_counter()
    save_file(tensors, str(path))
    save_s = time.perf_counter() - started
    started = time.perf_counter()
    loaded = load_file(str(path))
    total = sum(float(t[0, 0]) for t in loaded.values())  # touch every tensor
    load_s = time.perf_counter() - started
    path.unlink()
    del total
    return {"bytes": size, "save_GBps": size / save_s / 1e9, "load_GBps": size / load_s / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--families", default="cnn,rnn,lstm,transformer")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.families, args.epochs)))
        return
    rows, ratios = [], []
    for family in args.families.split(","):
        speed = {way: samples_per_second(run_one(way, family, args.epochs))
                 for way in ("raw-torch", "zoo-lightning", "plain-keras", "zoo-keras")}  # fmt: skip
        torch_ratio = speed["zoo-lightning"] / speed["raw-torch"]
        keras_ratio = speed["zoo-keras"] / speed["plain-keras"]
        ratios += [(torch_ratio, f"{family} lightning"), (keras_ratio, f"{family} keras")]
        rows.append((family, speed, torch_ratio, keras_ratio, speed["zoo-lightning"] / speed["zoo-keras"]))
    lines = [
        "| family | raw torch | zoo lightning | ratio | plain keras | zoo keras | ratio | lightning/keras |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for family, s, tr, kr, cross in rows:
        lines.append(
            f"| {family} | {s['raw-torch']:.0f} | {s['zoo-lightning']:.0f} | {tr:.2f} "
            f"| {s['plain-keras']:.0f} | {s['zoo-keras']:.0f} | {kr:.2f} | {cross:.2f} |"
        )
    lines.append("\nsamples/s, median of epochs 2+, 1 thread, batch size of each recipe, validation off")
    lines.append("\n| start-up | seconds |\n|---|---|")
    lines += [f"| `{k}` | {v:.3f} |" for k, v in startup().items()]
    io = checkpoint_io()
    lines.append(f"\ncheckpoint I/O, {io['bytes'] / 1e6:.0f} MB: save {io['save_GBps']:.2f} GB/s, "
                 f"load {io['load_GBps']:.2f} GB/s")  # fmt: skip
    worst = min(ratios)
    lines.append(f"\nworst zoo / hand-written ratio: {worst[0]:.3f} ({worst[1]})")
    text = "\n".join(lines)
    print(text)
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
