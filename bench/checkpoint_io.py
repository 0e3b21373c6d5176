"""Common-checkpoint throughput at gpt2 size, end to end through zoo's API (issues 18 and 33).

A run exports with ``zoo.backend.save_checkpoint`` and every later use starts with
``zoo.backend.load_checkpoint``, which returns a ready model: building the twin is part of
a load. This times exactly those two calls per framework on gpt2 (124M parameters, 498 MB of
float32), gpt2-medium (355M, 1.42 GB) and Qwen2-0.5B's shape (494M, 1.98 GB: 24 layers of
grouped-query attention with query/key/value biases, a 151,936-token tied embedding), next to
safetensors' own ``save_file`` and ``load_file`` of the same tensors (numpy), the floors. Every
zoo save is durable, so its floor is the durable one: ``save_file`` to a temporary file, an
fsync, the rename and an fsync of the folder (what any save that survives a crash costs on this
disk); ``save_file`` alone (the page cache) is shown beside it. A load reads the file just
written, from the page cache.

Each save is reported as a ratio to the durable floor, and each load to ``load_file``: in
every repetition the two are timed one after the other, each first in every other
repetition, and the ratio is floor time / zoo time (1.0 is as fast as the floor). Which of
the two goes first matters on this VM far more than either's code (gpt2-medium, 2026-11-27:
the same save measured 0.6-0.8x the floor going second and 2.0-2.8x going first), so each
figure is the geometric mean of a repetition in each order (two repetitions in one process,
which cancels the position), and the median of those over the rounds. A machine that slows
down between repetitions slows both sides.

Each round runs one fresh process per framework and model, interleaved; the GB/s figures are
the fastest of all rounds (on a shared machine other work only ever slows a run down). Also
shown: how long building the twin takes inside a load (torch: on the meta device; Keras:
initialisers skipped, ``zoo.nn.keras.skeleton``), the part of a load that is not I/O, and the
load into a twin already built (``zoo.checkpoint.tensors.load_tensors`` of the file's tensors, as a
fine-tuning start puts them into the model it trains): the same I/O without the build.

    .venv/bin/python bench/checkpoint_io.py [--models gpt2,gpt2-medium,qwen2-0.5b] [--rounds 3]
        [--frameworks lightning,keras] [--out FOLDER] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "checkpoint_io"
from results_section import write_section  # noqa: E402  (bench/ is the script's folder)

SECTION = "## Checkpoint I/O at gpt2 size (`bench/checkpoint_io.py`)"


def timed(function, *args, **kwargs) -> tuple[float, object]:
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - started, result


def measure(framework: str, model_name: str, repeats: int, threads: int | None, out: Path) -> dict:
    """One process: the model (created once, then loaded from its own checkpoint), ``repeats``
    repetitions of the floor load and zoo's load, the load into a built twin, the unsynced
    floor save, then the durable floor and zoo's save; each pair in the other order in every
    other repetition. Times in seconds.

    Each file is deleted as soon as it is timed, so that every save writes into page-cache
    memory the one before it has just freed. Memory freed longer ago is not the same: these
    VMs report free pages to their host (virtio-balloon), which takes them back, and each
    page costs a fault on the host when it is used again. 500 MB written after a 3 s pause
    took 2.2-4.2 s, into memory a file deleted just before had held 0.29-0.80 s (6 each,
    alternating, 2026-11-27, load 7; fsync 0.25 s either way). A second save while the
    first file still held its memory paid that."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from safetensors.numpy import load_file, save_file

    from zoo import api, registry
    from zoo.backend import load_checkpoint, save_checkpoint
    from zoo.checkpoint.tensors import model_tensors
    from zoo.nn.keras import skeleton as keras_skeleton

    if threads:
        limit_threads(framework, threads)
    out.mkdir(parents=True, exist_ok=True)
    source = out / f"{model_name}-{framework}.safetensors"
    if source.exists():
        model = load_checkpoint(source, framework)  # untimed: also warms up the first use
    else:
        model = api.create_model(model_name, framework)
        save_checkpoint(model, source)
    tensors = model_tensors(model)
    size = sum(array.nbytes for array in tensors.values())
    family, config = registry.get_family(model_name), registry.resolve_config(model_name)
    times: dict[str, list[float]] = {
        "floor_load": [], "load": [], "into": [], "floor_save": [], "floor_durable": [], "save": [],
        "build": [],
    }  # fmt: skip
    for index in range(repeats):
        order = 1 if index % 2 == 0 else -1
        fresh, floor = out / f"save-{framework}-{index}.safetensors", out / f"floor-{framework}.safetensors"
        loads = [("floor_load", load_file, (source,)), ("load", load_checkpoint, (source, framework))]
        for key, load, arguments in loads[::order]:
            times[key].append(timed(load, *arguments)[0])
        times["into"].append(timed(load_into, model, source)[0])
        times["floor_save"].append(timed(save_file, tensors, str(floor))[0])
        floor.unlink()
        durable_saves = [
            ("floor_durable", durable_save_file, (tensors, floor), floor),
            ("save", save_checkpoint, (model, fresh), fresh),
        ]
        for key, save, arguments, written in durable_saves[::order]:
            times[key].append(timed(save, *arguments)[0])
            written.unlink()  # the next one writes into the memory this file had in the page cache
        if framework == "keras":
            with keras_skeleton.initialisers_skipped():
                times["build"].append(timed(family.build_keras, config)[0])
        else:
            import torch

            with torch.device("meta"):
                times["build"].append(timed(family.build_torch, config)[0])
    return {"framework": framework, "model": model_name, "bytes": size, "times": times}


def load_into(model, path: Path) -> None:
    """A checkpoint's tensors into a twin already built: a load without the build."""
    from zoo.checkpoint.metadata import read_checkpoint
    from zoo.checkpoint.tensors import load_tensors

    load_tensors(model, read_checkpoint(path).float32_tensors())


def durable_save_file(tensors: dict, path: Path) -> None:
    """The floor of a save that survives a crash: safetensors' ``save_file`` to a temporary
    file in the same folder, an fsync, the rename over ``path`` and an fsync of the folder."""
    from safetensors.numpy import save_file

    temporary = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(temporary))
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def limit_threads(framework: str, threads: int) -> None:
    if framework == "keras":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    else:
        import torch

        torch.set_num_threads(threads)


def run_one(framework: str, model_name: str, repeats: int, threads: int | None, out: Path) -> dict:
    command = [sys.executable, __file__, "--one", framework, "--models", model_name]
    command += ["--repeats", str(repeats), "--out", str(out)]
    command += ["--threads", str(threads)] if threads else []
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"checkpoint_io {framework} {model_name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fastest(results: list[dict]) -> dict:
    """Per framework and model: the fastest time of each kind over every round, its GB/s, and
    the ratio of each floor's time to zoo's (see the module's docstring)."""
    merged: dict[tuple[str, str], dict] = {}
    for result in results:
        entry = merged.setdefault((result["model"], result["framework"]), {**result, "times": {}})
        for kind, values in result["times"].items():
            entry["times"].setdefault(kind, []).extend(values)
    for entry in merged.values():
        times = entry["times"]
        entry["best"] = {kind: min(values) for kind, values in times.items()}
        for kind in ("load", "into", "save", "floor_load", "floor_save", "floor_durable"):
            entry[f"{kind}_GBps"] = entry["bytes"] / entry["best"][kind] / 1e9
        for kind, floor in (("save", "floor_durable"), ("load", "floor_load")):
            ratios = [f / t for f, t in zip(times[floor], times[kind], strict=True)]
            pairs = zip(ratios[::2], ratios[1::2], strict=True)  # one each order, in one process
            entry[f"{kind}_ratio"] = statistics.median(math.sqrt(a * b) for a, b in pairs)
    return merged


def table(merged: dict, rounds: int, repeats: int) -> str:
    lines = [
        "| model | size | framework | save GB/s | durable floor GB/s | save / floor | floor save_file "
        "(no fsync) | load GB/s | floor load_file | load / floor | load s | of which build s "
        "| into a built twin GB/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, framework), e in merged.items():
        lines.append(
            f"| {model} | {e['bytes'] / 1e6:.0f} MB | {framework} | {e['save_GBps']:.2f} "
            f"| {e['floor_durable_GBps']:.2f} | {e['save_ratio']:.2f} | {e['floor_save_GBps']:.2f} "
            f"| {e['load_GBps']:.2f} | {e['floor_load_GBps']:.2f} | {e['load_ratio']:.2f} "
            f"| {e['best']['load']:.2f} | {e['best']['build']:.2f} | {e['into_GBps']:.2f} |"
        )
    lines.append(
        f"\nGB/s: fastest of {rounds} interleaved rounds x {repeats} repetitions, one fresh process per "
        "round, framework and model; one kernel thread (`--threads 1`). save / floor and load / floor: "
        "the floor's time over zoo's in the same repetition (1.00: as fast as the floor), the geometric "
        "mean of two repetitions in one process, one with each first, and the median of those over the "
        "rounds. Durable floor: `save_file` to a temporary "
        "file, fsync, rename, fsync of the folder"
    )
    return "\n".join(lines)


def write_results(text: str) -> None:
    write_section(SECTION, text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="gpt2,gpt2-medium,qwen2-0.5b")
    parser.add_argument("--frameworks", default="lightning,keras")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="repetitions inside each process")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the files written (several GB)")
    parser.add_argument("--json", action="store_true", help="one JSON line per framework and model")
    parser.add_argument("--write-results", action="store_true", help="rewrite this section of RESULTS.md")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats % 2:
        parser.error(f"--repeats {args.repeats}: give an even number (one repetition in each order)")
    if args.one:
        print(json.dumps(measure(args.one, args.models, args.repeats, args.threads, args.out)))
        return
    models, frameworks = args.models.split(","), args.frameworks.split(",")
    results = [
        run_one(framework, model, args.repeats, args.threads, args.out)
        for _ in range(args.rounds)
        for model in models
        for framework in frameworks
    ]
    merged = fastest(results)
    if args.json:
        for entry in merged.values():
            keys = ("framework", "model", "bytes", "save_GBps", "load_GBps", "save_ratio", "load_ratio")
            print(json.dumps({k: entry[k] for k in keys}))
        return
    text = table(merged, args.rounds, args.repeats)
    print(text)
    if args.write_results:
        write_results(text)


if __name__ == "__main__":
    main()
