"""The forward ``zoo predict`` runs, in each twin (issue 41): the Keras twin traced once
(``zoo.nn.keras.inference``, what ``zoo predict`` and ``zoo.nn.keras.inference.forward`` run), the Keras
twin's eager call (what ``zoo predict`` ran before), Keras' own ``model.predict_on_batch`` and the
torch twin eager under ``torch.inference_mode``, on resnet50 and convnext-tiny (torchvision's
convnext_tiny) at batch 1 and 8.

The same weights in every contender (the torch twin seeded, the Keras twin loaded from its
tensors), the same random (N, 3, 224, 224) batch; every contender's logits must match the torch
twin's. One kernel thread for each framework (``--threads``), contenders interleaved in rounds
after a warm-up call each (the trace happens there, reported apart as "first call"); each figure
is the median of the rounds, with the fastest and slowest beside it. Ratios: the torch twin's time
over each contender's (1.0: as fast as the torch twin) and the traced Keras forward's speed-up over
the eager call. timm / torchvision against zoo are ``bench/peers.py``'s.

    .venv/bin/python bench/prediction.py [--models resnet50,convnext-tiny] [--batches 1,8]
        [--rounds 5] [--threads 1] [--write-results]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from results_section import publish  # bench/ is the script's folder

SECTION = "## Prediction forward, Keras traced against eager and the torch twin (`bench/prediction.py`)"
TOLERANCE = 1e-3  # largest |logit difference| against the torch twin, relative to its largest logit


def threads(count: int) -> None:
    import tensorflow as tf
    import torch

    torch.set_num_threads(count)
    tf.config.threading.set_intra_op_parallelism_threads(count)
    tf.config.threading.set_inter_op_parallelism_threads(count)


def twins(name: str):
    import torch

    from zoo import registry
    from zoo.checkpoint.tensors import load_tensors, model_tensors

    family, config = registry.get_family(name), registry.resolve_config(name)
    torch.manual_seed(0)
    torch_model = family.build_torch(config).eval()
    keras_model = family.build_keras(config)
    load_tensors(keras_model, model_tensors(torch_model))
    return torch_model, keras_model


def contenders(torch_model, keras_model, x):
    """name -> a call returning float32 numpy logits for the batch ``x`` (canonical layout)."""
    import numpy as np
    import torch

    from zoo.keras.data import keras_layout
    from zoo.nn.keras.inference import traced_forward

    channels_last = keras_layout(x, "image")
    traced = traced_forward(keras_model)

    def torch_twin():
        with torch.inference_mode():
            return torch_model(torch.from_numpy(x)).numpy()

    return {
        "Keras twin, traced (zoo predict)": lambda: traced(channels_last),
        "Keras twin, eager call": lambda: np.asarray(keras_model(channels_last, training=False)),
        "Keras twin, predict_on_batch": lambda: np.asarray(keras_model.predict_on_batch(channels_last)),
        "torch twin, eager": torch_twin,
    }


def measure(name: str, batch: int, rounds: int) -> list[dict]:
    import numpy as np

    torch_model, keras_model = twins(name)
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    calls = contenders(torch_model, keras_model, x)
    times: dict[str, list[float]] = {key: [] for key in calls}
    first, outputs = {}, {}
    for key, call in calls.items():
        started = time.perf_counter()
        outputs[key] = call()
        first[key] = time.perf_counter() - started
    reference = outputs["torch twin, eager"]
    scale = float(np.abs(reference).max())
    for key, got in outputs.items():
        error = float(np.abs(got - reference).max()) / scale
        if error > TOLERANCE:
            raise SystemExit(
                f"{name} batch {batch}: {key}'s logits differ from the torch twin's by {error:.2e}"
            )
    for _ in range(rounds):
        for key, call in calls.items():
            started = time.perf_counter()
            call()
            times[key].append(time.perf_counter() - started)
    traces = keras_model.__dict__["_zoo_forward"].traces
    torch_time = statistics.median(times["torch twin, eager"])
    eager_time = statistics.median(times["Keras twin, eager call"])
    rows = []
    for key, values in times.items():
        median = statistics.median(values)
        rows.append({
            "model": name, "batch": batch, "contender": key, "median": median, "fastest": min(values),
            "slowest": max(values), "first": first[key], "x_torch": torch_time / median,
            "x_eager": eager_time / median, "traces": traces,
        })  # fmt: skip
    return rows


def table(rows: list[dict], rounds: int, count: int) -> str:
    lines = [
        "| model | batch | contender | ms (median) | fastest-slowest ms | first call s | torch time / this "
        "| eager Keras time / this |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['contender']} | {r['median'] * 1e3:.1f} "
            f"| {r['fastest'] * 1e3:.1f}-{r['slowest'] * 1e3:.1f} | {r['first']:.2f} | {r['x_torch']:.2f} "
            f"| {r['x_eager']:.2f} |"
        )
    traces = sorted({(r["model"], r["batch"], r["traces"]) for r in rows})
    lines += [
        "",
        f"{count} kernel thread(s) per framework, median of {rounds} interleaved rounds after one warm-up "
        "call each (first call: the warm-up, the trace included); same weights, every contender's logits "
        f"within {TOLERANCE:g} (relative) of the torch twin's. Traces of zoo predict's traced forward: "
        + ", ".join(f"{m} batch {b}: {t}" for m, b, t in traces)
        + ".",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="resnet50,convnext-tiny")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    threads(args.threads)
    rows = []
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            rows += measure(name, batch, args.rounds)
            print(table(rows[-4:], args.rounds, args.threads).split("\n\n")[0], file=sys.stderr)
    text = table(rows, args.rounds, args.threads)
    return publish(SECTION, text, args.write_results)


if __name__ == "__main__":
    sys.exit(main())
