"""Streaming data (data.name stream): memory against corpus size, pipeline against training
throughput, time to first batch. One run, every figure side by side.

Generates, once (kept under bench/out/streaming/ between runs with the same settings):

- a text corpus of ``--corpus-mb`` MB (1x), and the same documents repeated to 2x and 4x:
  documents of 40-400 words drawn from a Zipf vocabulary, half the shards JSONL, half Parquet;
  a byte-level BPE of 4096 tokens trained on its first MB (shared by every run, so no run
  trains one);
- ``--images`` pictures (smooth colour fields with noise, 160x128, 10 classes) as JPEG bytes
  in two Parquet shards.

Then, each in a fresh process (``trainer.num_threads=1``: the model's kernels on one thread,
the decoders on the other core):

1. **memory**: gpt2-micro (seq 128, batch 16) trains ``--steps`` steps on the 1x, 2x and 4x
   corpus in each framework, ``data.workers=0`` (everything in one process), from an empty
   index cache, so the process also indexes the whole corpus (reads, parses and tokenizes
   every document). Peak resident memory is the process's ``VmHWM``.
2. **throughput**: for gpt2-micro on the 1x corpus and resnet18 on the pictures (64 px,
   batch 32), with ``data.workers`` 0, 1 and 2: the pipeline alone (zoo's DataLoader, zoo's
   tf.data stream, iterated without a model) and training (``--steps`` steps, two epochs of
   them; the second epoch's clock), in examples/s. A pipeline faster than training keeps up.
3. **time to first batch**: from ``load_dataset`` to the first batch out of each framework's
   pipeline, with an empty index cache (the index pass included) and with the index cached.

Training runs are capped at ``--steps`` steps an epoch by shortening the training stream to
its first ``steps * batch_size`` examples (the order is the same; the corpus is still indexed
whole). Prints the tables (with the load average before and after) and writes them to
bench/out/streaming.md; ``--write-results`` also rewrites the section of bench/RESULTS.md.

    .venv/bin/python bench/streaming.py [--corpus-mb 8] [--images 640] [--steps 12] [--write-results]

About 40 minutes on a busy 2-core machine (most of it process start-up, TensorFlow's import
and the index passes: tokenizing every document runs at 0.3-0.6 MB/s there).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()  # a child process's start, about: before numpy, zoo, torch or TensorFlow

import numpy as np  # noqa: E402
import text_corpus  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
WORK = OUT / "streaming"
FRAMEWORKS = ("lightning", "keras")
HEADING = "## Streaming data (`bench/streaming.py`)"
SCALES = (1, 2, 4)
WORKERS = (0, 1, 2)
SHARD_MB = 6  # text per shard, about
BUFFER = 1000  # data.shuffle_buffer: records each reader holds (the corpus holds many more)


# ------------------------------------------------------------------------------ data


def write_corpus(megabytes: int) -> dict[int, Path]:
    """The 1x corpus and its 2x, 4x copies (the same shards again, renamed), and a tokenizer."""
    folders = {scale: WORK / f"corpus-{megabytes}mb-{scale}x" for scale in SCALES}
    stamp = WORK / f"corpus-{megabytes}mb.done"
    if stamp.is_file():
        return folders
    from zoo.tokenizer import DEFAULT_SPECIAL_TOKENS, train_bpe

    first = folders[1]
    shutil.rmtree(first, ignore_errors=True)
    text_corpus.write_corpus(first, megabytes, SHARD_MB)
    for scale in SCALES[1:]:
        shutil.rmtree(folders[scale], ignore_errors=True)
        folders[scale].mkdir()
        for copy in range(scale):
            for path in sorted(first.iterdir()):
                shutil.copy(path, folders[scale] / f"copy{copy}-{path.name}")
    train_bpe(text_corpus.bpe_sample(first), 4096, DEFAULT_SPECIAL_TOKENS).save(WORK)
    stamp.touch()
    return folders


def write_pictures(count: int) -> Path:
    """``count`` 160x128 JPEG pictures of 10 classes, as bytes in two Parquet shards."""
    folder = WORK / f"pictures-{count}"
    stamp = WORK / f"pictures-{count}.done"
    if stamp.is_file():
        return folder
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    rows = []
    for i in range(count):
        corners = rng.uniform(0, 255, (2, 2, 3))
        field = np.array(Image.fromarray(corners.astype(np.uint8)).resize((160, 128), Image.BILINEAR), float)
        picture = np.clip(field + rng.normal(0, 12, field.shape), 0, 255).astype(np.uint8)
        encoded = io.BytesIO()
        Image.fromarray(picture).save(encoded, "JPEG", quality=90)
        rows.append({"image": {"bytes": encoded.getvalue(), "path": None}, "label": i % 10})
    for half in range(2):
        pq.write_table(
            pa.Table.from_pylist(rows[half::2]), folder / f"part-{half}.parquet", row_group_size=256
        )
    stamp.touch()
    return folder


def recipe(model: str, data: Path, workers: int) -> dict:
    # Evaluation in small batches: a language model's logits over 512 x 128 tokens of a 4096-token
    # vocabulary would be 1 GB, and the carved test split grows with the corpus.
    common = {
        "name": "stream",
        "path": str(data),
        "workers": workers,
        "val_fraction": 0.0,
        "eval_batch_size": 16,
    }
    trainer = {"max_epochs": 2, "progress_bar": False, "num_threads": 1, "seed": 0}
    if model == "gpt2-micro":
        tokenizer = str(WORK / "tokenizer.json")
        data_cfg = {
            **common,
            "seq_len": 128,
            "batch_size": 16,
            "tokenizer": tokenizer,
            "test_fraction": 0.002,
        }
        return {"model": {"architecture": "gpt2-micro"}, "data": data_cfg, "trainer": trainer,
                "optimizer": {"name": "adamw", "lr": 0.001}}  # fmt: skip
    data_cfg = {**common, "task": "classification", "image_column": "image", "image_size": 64,
                "batch_size": 32, "test_fraction": 0.05}  # fmt: skip
    return {"model": {"architecture": "resnet18"}, "data": data_cfg, "trainer": trainer,
            "optimizer": {"name": "adam", "lr": 0.001}}  # fmt: skip


# ------------------------------------------------------------------------------ one measurement


def peak_rss() -> int:
    """This process's peak resident memory (``VmHWM``, bytes): not ``ru_maxrss``, which after
    an exec is at least the parent's resident memory at the fork."""
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) * 1024


def train(spec: dict) -> dict:
    """``zoo train``'s plan, its training stream cut to ``steps`` batches an epoch (or, with
    ``whole_epoch``, left whole and training stopped after ``steps`` steps). Besides
    the speed and the peak: the seconds the plan took (loading the data: the index pass), the
    peak by then, and (``data.workers=0``: batches decoded in this process) the seconds from the
    process's start to the first batch decoded after the plan."""
    from zoo.api import execute
    from zoo.data.stream import Stream
    from zoo.plan import plan_run

    raw = spec["recipe"]
    raw["export"] = {"dir": spec["runs"], "run_name": spec["name"]}
    planning = time.perf_counter()
    plan = plan_run(raw, spec["framework"])
    planned, planned_peak = time.perf_counter(), peak_rss()
    first: list[float] = []
    decode = Stream.batch

    def timed(self, *args, **kwargs):
        batch = decode(self, *args, **kwargs)
        if not first:
            first.append(time.perf_counter() - STARTED)
        return batch

    Stream.batch = timed
    train_split = plan.dataset.train
    examples = min(len(train_split), spec["steps"] * raw["data"]["batch_size"])
    if spec.get("whole_epoch"):
        stop_after(spec["steps"], spec["framework"])
    else:
        capped = dataclasses.replace(train_split.x, length=examples)
        plan = dataclasses.replace(
            plan, dataset=dataclasses.replace(plan.dataset, train=dataclasses.replace(train_split, x=capped))
        )
    result = execute(plan)
    seconds = float(result.history[-1]["epoch_seconds"])
    return {"examples_per_s": examples / seconds, "peak_rss": peak_rss(), "examples": examples,
            "plan_s": planned - planning, "plan_peak_rss": planned_peak,
            "first_batch_s": first[0] if first else None}  # fmt: skip


def stop_after(steps: int, framework: str) -> None:
    """Training stopped after ``steps`` steps by the framework's own limit (Lightning's
    ``max_steps``, Keras' ``steps_per_epoch``; recipes have none), set where zoo makes the
    trainer: the sampler and the keys still span the split's whole epoch."""
    if framework == "lightning":
        import lightning as L

        make = L.Trainer.__init__
        L.Trainer.__init__ = lambda self, *args, **kwargs: make(self, *args, **{**kwargs, "max_steps": steps})
        return
    import keras

    fit = keras.Model.fit
    keras.Model.fit = lambda self, *args, **kwargs: fit(self, *args, **{**kwargs, "steps_per_epoch": steps})


def pipeline(spec: dict) -> dict:
    """The framework's input pipeline alone: the first batch's time from ``load_dataset``,
    then examples/s over ``batches`` more."""
    from zoo import registry
    from zoo.data import load_dataset
    from zoo.recipe import load_recipe

    loaded = load_recipe(spec["recipe"])
    kind = registry.get_family(loaded.model.architecture).input_kind
    started = time.perf_counter()
    split = load_dataset(loaded.data, kind).train
    batch, count = loaded.data.batch_size, spec["batches"]
    batches = epochs_of(split, batch, spec["framework"], kind)
    next(batches)
    first = time.perf_counter() - started
    timed = time.perf_counter()
    for _ in range(count):
        next(batches)
    seconds = time.perf_counter() - timed
    return {"first_batch_s": first, "examples_per_s": count * batch / seconds, "peak_rss": peak_rss()}


def epochs_of(split, batch: int, framework: str, kind: str):
    """The framework's training batches, epoch after epoch."""
    if framework == "keras":
        from zoo.keras.data import train_dataset

        yield from train_dataset(split, batch, 0, True, 1000, kind)
        return
    from zoo.lightning.data import loader

    batches = loader(split, batch, 0, True)
    for epoch in range(1000):
        batches.sampler.set_epoch(epoch)
        yield from batches


def child(kind: str, spec: dict) -> dict:
    """One measurement in a fresh process (its own index cache when ``spec`` names one)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "ZOO_CACHE": spec.get("cache", str(WORK / "cache"))}
    command = [sys.executable, __file__, "--child", kind, json.dumps(spec)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"{kind} {spec.get('name')} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ the run


def commit(checkout: Path = ROOT) -> str:
    command = ["git", "rev-parse", "--short", "HEAD"]
    return subprocess.run(command, cwd=checkout, capture_output=True, text=True).stdout.strip()


def load() -> str:
    """The load averages over 1, 5 and 15 minutes, as ``uptime`` prints them."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def job(args, model: str, data: Path, workers: int, framework: str, **extra) -> dict:
    """What a child process measures: ``extra`` names its run (train) or index cache."""
    return {"recipe": recipe(model, data, workers), "framework": framework, "steps": args.steps,
            "batches": args.batches, "runs": str(WORK / "runs"), **extra}  # fmt: skip


def measure(args) -> str:
    folders = write_corpus(args.corpus_mb)
    pictures = write_pictures(args.images)
    shutil.rmtree(WORK / "runs", ignore_errors=True)
    started_load, started = load(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    sizes = {s: sum(p.stat().st_size for p in folders[s].iterdir()) / 1e6 for s in SCALES}
    memory = {}
    for scale in SCALES:
        for framework in FRAMEWORKS:
            cache = WORK / "cold-cache"
            shutil.rmtree(cache, ignore_errors=True)
            name = f"rss-{scale}-{framework}"
            memory[scale, framework] = child("train", job(args, "gpt2-micro", folders[scale], 0, framework,
                                                         name=name, cache=str(cache)))  # fmt: skip
            print(f"memory {scale}x {framework}: {memory[scale, framework]}", file=sys.stderr)
    speeds, firsts = {}, {}
    for model, data in (("gpt2-micro", folders[1]), ("resnet18", pictures)):
        for framework in FRAMEWORKS:
            cache = WORK / f"first-{model}"
            shutil.rmtree(cache, ignore_errors=True)
            for state in ("cold", "warm"):
                first = child("pipeline", job(args, model, data, 0, framework, batches=1, cache=str(cache)))
                firsts[model, framework, state] = first["first_batch_s"]
            for workers in WORKERS:
                alone = child("pipeline", job(args, model, data, workers, framework))["examples_per_s"]
                name = f"{model}-{framework}-{workers}"
                trained = child("train", job(args, model, data, workers, framework, name=name))[
                    "examples_per_s"
                ]
                speeds[model, framework, workers] = (alone, trained)
                print(f"{model} {framework} workers {workers}: {alone:.0f} vs {trained:.0f}", file=sys.stderr)
    return report(args, started, started_load, sizes, memory, speeds, firsts)


def report(args, started, started_load, sizes, memory, speeds, firsts) -> str:
    lines = [
        "```bash",
        ".venv/bin/python bench/streaming.py --write-results   # the tables below",
        "```",
        "",
        f"Measured {started}, commit {commit()}, on {os.cpu_count()} cores; load averages "
        f"(1, 5, 15 min) {started_load} at the start, {load()} at the end. Corpus: {args.corpus_mb} MB "
        "of generated text (1x), repeated to 2x and 4x, half JSONL and half Parquet shards; gpt2-micro, "
        f"seq 128, batch 16, BPE 4096. Pictures: {args.images} JPEGs of 160x128 in Parquet, resnet18 "
        f"at 64 px, batch 32. {args.steps} training steps an epoch; model kernels on one thread.",
        "",
        "Peak resident memory (`VmHWM`) of one process that indexes the whole corpus (from an empty "
        "cache) and trains gpt2-micro on it, `data.workers=0`:",
        "",
        "| corpus | MB | lightning peak MB | keras peak MB |",
        "|---|---|---|---|",
    ]
    for scale in SCALES:
        row = [f"{memory[scale, fw]['peak_rss'] / 1e6:.0f}" for fw in FRAMEWORKS]
        lines.append(f"| {scale}x | {sizes[scale]:.0f} | {' | '.join(row)} |")
    lines += [
        "",
        "Examples/s of the input pipeline alone and of training on it (second epoch), by `data.workers` "
        "(torch DataLoader processes / tf.data parallel calls):",
        "",
        "| model | framework | workers | pipeline alone | training | pipeline / training |",
        "|---|---|---|---|---|---|",
    ]
    for (model, framework, workers), (alone, trained) in speeds.items():
        lines.append(
            f"| {model} | {framework} | {workers} | {alone:.0f} | {trained:.0f} | {alone / trained:.1f} |"
        )
    lines += [
        "",
        "Seconds from `load_dataset` to the first batch out of the pipeline (`data.workers=0`), "
        "with an empty index cache (the index pass included) and with the index cached:",
        "",
        "| model | framework | empty cache | index cached |",
        "|---|---|---|---|",
    ]
    for model in ("gpt2-micro", "resnet18"):
        for framework in FRAMEWORKS:
            cold, warm = firsts[model, framework, "cold"], firsts[model, framework, "warm"]
            lines.append(f"| {model} | {framework} | {cold:.1f} | {warm:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus-mb", type=int, default=8)
    parser.add_argument("--images", type=int, default=640)
    parser.add_argument("--steps", type=int, default=12, help="training steps an epoch")
    parser.add_argument("--batches", type=int, default=40, help="batches the pipeline alone is timed over")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, spec = args.child
        print(json.dumps({"train": train, "pipeline": pipeline}[kind](json.loads(spec))))
        return
    WORK.mkdir(parents=True, exist_ok=True)
    publish(measure(args), "streaming", HEADING, args.write_results)


def publish(text: str, name: str, heading: str, write_results: bool) -> None:
    """Print the tables, keep them in bench/out/``name``.md and (``write_results``) rewrite
    their section of bench/RESULTS.md."""
    print(text)
    (OUT / f"{name}.md").write_text(text)
    if write_results:
        from results_section import write_section

        write_section(heading, text)


if __name__ == "__main__":
    main()
