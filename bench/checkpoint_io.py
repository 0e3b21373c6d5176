"""Common-checkpoint throughput, end to end through zoo's own API (issue 7).

A run exports its model with ``zoo.checkpoint.save_checkpoint`` and every later use starts
with ``zoo.checkpoint.load_checkpoint``, which returns a ready model: building the twin is
part of a load. Raw safetensors speed says little about either, so this times exactly those
two calls on a ~100M-parameter transformer LM (434 MB of float32). Target: >= 1 GB/s both
ways in both frameworks, from the page cache.

Each save goes to a fresh path, as a run's export does (replacing an existing file costs
more); each load reads the file just saved, so it comes from the page cache. Figures are
the median of ``repeats`` after one untimed round, one thread by default (a noisy 2-core
machine).

    .venv/bin/python bench/checkpoint_io.py [--frameworks lightning,keras] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

MODEL = dict(
    task="language_modeling", vocab_size=16000, d_model=1024, num_heads=16, num_layers=6, ff_dim=4096
)  # 108.6M parameters


def limit_threads(framework: str, threads: int) -> None:
    if framework == "keras":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        with contextlib.suppress(RuntimeError):  # TensorFlow is already running: keep its threads
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
    else:
        import torch

        torch.set_num_threads(threads)


def checkpoint_io(
    framework: str, *, repeats: int = 3, threads: int | None = 1, architecture: str = "transformer", **fields
) -> dict:
    """Median save and load throughput (GB/s of tensor bytes) of one twin through zoo's API;
    ``fields`` build another model than ``MODEL``, the ~100M-parameter transformer LM."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo import api
    from zoo.checkpoint import load_checkpoint, model_tensors, save_checkpoint

    if threads:
        limit_threads(framework, threads)
    model = api.create_model(architecture, framework, **(fields or MODEL))
    size = sum(array.nbytes for array in model_tensors(model).values())
    saves, loads = [], []
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as folder:
        for index in range(repeats + 1):  # round 0 warms up (first imports, first use of memory)
            path = Path(folder) / f"model-{index}.safetensors"
            start = time.perf_counter()
            save_checkpoint(model, path)
            saves.append(time.perf_counter() - start)
            start = time.perf_counter()
            loaded = load_checkpoint(path, framework)
            loads.append(time.perf_counter() - start)
            del loaded
            if index:
                (Path(folder) / f"model-{index - 1}.safetensors").unlink()
    return {
        "framework": framework,
        "bytes": size,
        "save_GBps": size / statistics.median(saves[1:]) / 1e9,
        "load_GBps": size / statistics.median(loads[1:]) / 1e9,
        "save_s": saves[1:],
        "load_s": loads[1:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="lightning,keras")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON line per framework")
    args = parser.parse_args()
    if not args.json:
        print(f"{'framework':<10} {'MB':>6} {'save GB/s':>10} {'load GB/s':>10}")
    for framework in args.frameworks.split(","):
        result = checkpoint_io(framework, repeats=args.repeats, threads=args.threads)
        if args.json:
            print(json.dumps(result))
            continue
        print(
            f"{framework:<10} {result['bytes'] / 1e6:>6.0f} {result['save_GBps']:>10.2f} "
            f"{result['load_GBps']:>10.2f}"
        )


if __name__ == "__main__":
    main()
