"""Cold start (issue 41): a checkpoint loaded into each twin, build included, the first load of a
fresh process and the loads after it, in GB/s, both twins side by side in one run; and where a
Keras load's time goes.

Each round starts one fresh process per framework, interleaved (lightning, keras, lightning,
keras, ...). A process imports its framework and zoo (untimed: that is Python's start, not the
load), makes the model's checkpoint once if the file is not there yet (gpt2: 124M parameters,
498 MB of float32), then times ``zoo.backend.load_checkpoint``: the first call of the process
("first load": what ``zoo.load`` costs a script that starts, Keras' and TensorFlow's first-use
costs included) and ``--repeats`` more. The file is read from the page cache. Beside each load,
safetensors' ``load_file`` of the same file (numpy): the floor of a read into fresh memory.

For the Keras twin, each stage of a load is timed inside the load (wrapped, the same calls):
the skeleton build on the main thread (``family.build_keras`` with initialisers skipped), the
file read on a worker thread (``read_aligned``: preadv into fresh aligned arrays), the ports'
layout copies (busy time summed over the pool's threads, which overlap with the build), the
main thread's wait for them once its build is done, and the hand-over to the variables
(``tensors_to_keras``, DLPack). GB/s: the fastest of all rounds (other work on a shared machine
only ever slows a run down); the stages: their median.

    .venv/bin/python bench/cold_start.py [--model gpt2] [--rounds 3] [--repeats 3] [--threads 1]
        [--write-results]
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

from results_section import publish  # bench/ is the script's folder

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "cold_start"
SECTION = "## Cold start: a checkpoint into each twin, build included (`bench/cold_start.py`)"
FRAMEWORKS = ("lightning", "keras")


def staged_keras_load(stages: dict[str, float]):
    """Wrap the stages of ``load_keras`` with timers adding into ``stages`` (seconds)."""
    import zoo.checkpoint.tensors as tensors

    def timed(name, function):
        def run(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                stages[name] = stages.get(name, 0.0) + time.perf_counter() - started

        return run

    tensors.read_aligned = timed("read", tensors.read_aligned)
    tensors._keras_port = timed("ports (busy)", tensors._keras_port)
    tensors.tensors_to_keras = timed("hand-over", tensors.tensors_to_keras)
    return timed


def measure(framework: str, model_name: str, repeats: int, threads: int, out: Path) -> dict:
    """One process: the first load and ``repeats`` more, each beside a ``load_file`` floor."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from safetensors.numpy import load_file

    from zoo import api, registry
    from zoo.backend import load_checkpoint, save_checkpoint

    if framework == "keras":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    else:
        import torch

        torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    source = out / f"{model_name}.safetensors"
    if not source.exists():  # made once, by the first process (torch, the faster build)
        save_checkpoint(api.create_model(model_name, "lightning", seed=0), source)
    stages: dict[str, float] = {}
    family = registry.get_family(model_name)
    if framework == "keras":
        timed = staged_keras_load(stages)
        object.__setattr__(family, "build_keras", timed("build", family.build_keras))
    loads, floors, staged = [], [], []
    for _ in range(repeats + 1):
        stages.clear()
        started = time.perf_counter()
        model = load_checkpoint(source, framework)
        loads.append(time.perf_counter() - started)
        staged.append(dict(stages))
        del model
        started = time.perf_counter()
        floor = load_file(str(source))
        floors.append(time.perf_counter() - started)
        del floor
    return {
        "framework": framework, "model": model_name, "bytes": source.stat().st_size,
        "loads": loads, "floors": floors, "stages": staged,
    }  # fmt: skip


def run_one(framework: str, args) -> dict:
    command = [sys.executable, __file__, "--one", framework, "--model", args.model]
    command += ["--repeats", str(args.repeats), "--threads", str(args.threads), "--out", str(args.out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"cold_start {framework} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict], rounds: int, repeats: int, threads: int) -> str:
    size = results[0]["bytes"]
    lines = [
        "| twin | first load s | first load GB/s | later loads s | later loads GB/s | load_file floor GB/s |",
        "|---|---|---|---|---|---|",
    ]
    for framework in FRAMEWORKS:
        mine = [r for r in results if r["framework"] == framework]
        if not mine:
            continue
        first = min(r["loads"][0] for r in mine)
        later = min(t for r in mine for t in r["loads"][1:])
        floor = min(t for r in mine for t in r["floors"])
        lines.append(
            f"| {framework} | {first:.2f} | {size / first / 1e9:.2f} | {later:.2f} "
            f"| {size / later / 1e9:.2f} | {size / floor / 1e9:.2f} |"
        )
    keras = [s for r in results if r["framework"] == "keras" for s in r["stages"][1:]]
    if keras:
        names = ["build", "read", "ports (busy)", "hand-over"]
        lines += ["", "Keras load, where the time goes (s, median of the later loads):", ""]
        lines += ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
        medians = [statistics.median(s.get(n, 0.0) for s in keras) for n in names]
        lines.append("| " + " | ".join(f"{m:.3f}" for m in medians) + " |")
    lines += [
        "",
        f"{results[0]['model']}, {size / 1e6:.0f} MB of float32 from the page cache; {rounds} rounds, one "
        f"fresh process per twin and round, interleaved; {repeats} later loads a process; {threads} kernel "
        "thread(s). GB/s: the fastest. Build, read and ports overlap (the read and the ports run on "
        "worker threads while the main thread builds).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.model, args.repeats, args.threads, args.out)))
        return 0
    results = [run_one(framework, args) for _ in range(args.rounds) for framework in FRAMEWORKS]
    text = table(results, args.rounds, args.repeats, args.threads)
    return publish(SECTION, text, args.write_results)


if __name__ == "__main__":
    sys.exit(main())
