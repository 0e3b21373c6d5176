"""Activation memory and step time with and without gradient checkpointing, in both frameworks.

One row per family's small preset, plus resnet-8 (a plain ConvNet block keeps nothing its
checkpoint would not keep too, residual blocks do); the recurrent and transformer rows run at
6 layers and 128 steps, where activations dominate; resnet50 and vit-base at their published
input, batch 8 x 3 x 224 x 224 (``--rows resnet50 vit-base`` runs only those); gpt2 at batch 4 x 256
tokens and bert-base at batch 8 x 128 (``--rows gpt2 bert-base``). Measured over one training step
(forward, backward, SGD update):

- torch: bytes of the tensors autograd keeps for backward, each storage counted once
  (``saved_tensors_hooks``). A checkpointed block keeps only its inputs; the recompute in
  backward briefly holds one block's activations again, which this figure leaves out.
- TensorFlow: peak minus resting bytes of the CPU allocator over one step of a
  ``tf.function`` (``get_memory_info`` after ``reset_memory_stats``): the real peak,
  gradients and the recompute included, as the median over a few fresh traces.

Step times are medians on one thread (two threads swing 2-5x when anything else runs).
The targets: at least a 50 % cut of activation memory for the LSTM and transformer rows,
at no more than 1.5x the step time. Run ``.venv/bin/python bench/activation_memory.py``;
the table is printed and written to ``bench/out/activation_memory.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np

from zoo import registry
from zoo.keras.data import keras_layout
from zoo.memory import saved_for_backward

MEMORY_TARGET = 0.5  # checkpointed / plain activation memory, at most
TIME_TARGET = 1.5  # checkpointed / plain step time, at most
OUT = Path(__file__).parent / "out" / "activation_memory.md"


@dataclass(frozen=True)
class Row:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    batch: int = 16
    steps: int = 128  # sequence length of a language-modelling row
    target: bool = False  # held to the memory and time targets


ROWS = (
    Row("convnet-small", {"in_channels": 3, "image_size": 32}, batch=64),
    Row("resnet-8", {"in_channels": 3, "image_size": 32}, batch=64),
    Row("rnn-small", {"task": "language_modeling", "num_layers": 6}),
    Row("lstm-small", {"task": "language_modeling", "num_layers": 6}, target=True),
    Row("transformer-small", {"task": "language_modeling", "num_layers": 6}, target=True),
    # The published networks at their published input (224x224x3), batch 8 (issue 14).
    Row("resnet50", batch=8),
    Row("vit-base", batch=8),
    # The published language models at the shapes (issue 15): ``--rows gpt2 bert-base``.
    Row("gpt2", {"task": "language_modeling"}, batch=4, steps=256),
    Row("bert-base", {"task": "classification", "num_classes": 2}, batch=8, steps=128),
)


@dataclass
class Measure:
    memory: int  # bytes
    seconds: float  # median step time


def batch(row: Row, config, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs in the canonical (torch) layout and integer targets: next tokens, or classes."""
    rng = np.random.default_rng(seed)
    if getattr(config, "task", "classification") == "language_modeling":
        tokens = rng.integers(0, config.vocab_size, size=(row.batch, row.steps + 1))
        return tokens[:, :-1], tokens[:, 1:]
    if registry.get_family(row.name).input_kind == "tokens":  # a text classifier (BERT)
        tokens = rng.integers(0, config.vocab_size, size=(row.batch, row.steps))
        return tokens, rng.integers(0, config.num_classes, size=row.batch)
    x = rng.normal(size=(row.batch, *config.sample_shape())).astype(np.float32)
    return x, rng.integers(0, config.num_classes, size=row.batch)


def median_seconds(step: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ------------------------------------------------------------------------------------ torch


def measure_torch(row: Row, config, checkpointing: bool, repeats: int) -> Measure:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = registry.get_family(row.name).build_torch(config).train()
    model.set_grad_checkpointing(checkpointing)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = (torch.from_numpy(a) for a in batch(row, config))

    def loss() -> torch.Tensor:
        out = model(x)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    with saved_for_backward() as storages:
        value = loss()
    value.backward()
    step()  # warm-up
    return Measure(sum(storages.values()), median_seconds(step, repeats))


# ------------------------------------------------------------------------------------ Keras


def measure_keras(row: Row, config, checkpointing: bool, repeats: int, builds: int) -> Measure:
    """The median peak over ``builds`` fresh models and traces, and the step time of the first.

    TensorFlow's executor orders a graph's ready ops differently from one trace to the next,
    and the peak of the recurrent rows moves with it (the LSTM's plain step from 75 to 200
    MiB in one process); one step of one trace repeats exactly.
    """
    peaks, seconds = [], 0.0
    for build in range(builds):
        step = keras_step(row, config, checkpointing)
        step()  # trace and warm up
        peaks.append(peak_bytes(step))
        if build == 0:
            seconds = median_seconds(step, repeats)
    return Measure(int(statistics.median(peaks)), seconds)


def keras_step(row: Row, config, checkpointing: bool) -> Callable[[], None]:
    """One training step of a fresh Keras twin, as ``fit`` runs it: a tf.function with SGD."""
    import keras
    import tensorflow as tf

    family = registry.get_family(row.name)
    model = family.build_keras(config)
    model.set_grad_checkpointing(checkpointing)
    optimizer = keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = batch(row, config)
    x, y = tf.constant(keras_layout(x, family.input_kind)), tf.constant(y)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return lambda: train_step(x, y).numpy()


def peak_bytes(step: Callable[[], None]) -> int:
    """Peak minus resting bytes of TensorFlow's CPU allocator over one step."""
    import tensorflow as tf

    tf.config.experimental.reset_memory_stats("CPU:0")
    resting = tf.config.experimental.get_memory_info("CPU:0")["current"]
    step()
    return tf.config.experimental.get_memory_info("CPU:0")["peak"] - resting


# ------------------------------------------------------------------------------------ table


def describe(row: Row, config) -> str:
    fields = config.model_dump()
    layers = fields.get("num_layers", fields.get("n_layer"))
    if fields.get("task") == "language_modeling":
        return f"{layers} layers, LM, batch {row.batch} x {row.steps} steps"
    if registry.get_family(row.name).input_kind == "tokens":
        return f"{layers} layers, classifier, batch {row.batch} x {row.steps} tokens"
    shape = "x".join(str(s) for s in config.sample_shape())
    return f"batch {row.batch} x {shape}"


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per measurement (median)")
    parser.add_argument("--builds", type=int, default=5, help="fresh Keras traces per memory figure (median)")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the markdown table")
    parser.add_argument("--rows", nargs="*", default=None, help="only these rows (model names)")
    args = parser.parse_args()
    rows = [row for row in ROWS if args.rows is None or row.name in args.rows]

    import tensorflow as tf
    import torch

    torch.set_num_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    header = (
        "| model | size | framework | activations plain (MiB) | checkpointed (MiB) | memory ratio "
        "| step plain (ms) | checkpointed (ms) | time ratio |"
    )
    lines = [header, "|" + "---|" * 9]
    print("\n".join(lines), flush=True)
    failures = []
    measures = {
        "torch": lambda row, config, on: measure_torch(row, config, on, args.repeats),
        "keras": lambda row, config, on: measure_keras(row, config, on, args.repeats, args.builds),
    }
    for row in rows:
        config = registry.resolve_config(row.name, **row.overrides)
        for framework, measure in measures.items():
            plain, checkpointed = measure(row, config, False), measure(row, config, True)
            memory = checkpointed.memory / plain.memory
            slowdown = checkpointed.seconds / plain.seconds
            lines.append(
                f"| {row.name} | {describe(row, config)} | {framework} | {mib(plain.memory)} "
                f"| {mib(checkpointed.memory)} | {memory:.2f} | {plain.seconds * 1e3:.0f} "
                f"| {checkpointed.seconds * 1e3:.0f} | {slowdown:.2f} |"
            )
            print(lines[-1], flush=True)
            if row.target and (memory > MEMORY_TARGET or slowdown > TIME_TARGET):
                failures.append(f"{row.name} ({framework}): memory x{memory:.2f}, time x{slowdown:.2f}")

    verdict = (
        f"Targets hold: every LSTM and transformer row keeps at most {MEMORY_TARGET:.0%} of its "
        f"activation memory at no more than {TIME_TARGET}x the step time."
        if not failures
        else "Targets do NOT hold: " + "; ".join(failures) + "."
    )
    print(verdict)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    notes = (
        "torch: bytes saved for backward (each storage once; the recompute's transient block is not "
        "counted). Keras/TensorFlow: peak minus resting CPU allocator bytes over one tf.function "
        f"training step (recompute included), median of {args.builds} fresh traces. Step times: median "
        f"of {args.repeats} steps on one thread (torch, and TensorFlow intra- and inter-op), SGD "
        "update included."
    )
    args.out.write_text(
        "# Activation memory with gradient checkpointing\n\n"
        + "\n".join(lines)
        + f"\n\n{notes}\n\n{verdict}\n"
    )


if __name__ == "__main__":
    main()
