"""What mixed precision costs each twin, and how far the two twins' mixed runs are apart.

For every shipped recipe: one batch of its data, the twins holding the same initial
tensors (torch's, under the recipe's seed), and the gradients of the loss at 32-true and
at each mixed precision in both frameworks. Printed per recipe:

- torch: bf16 vs its own float32 (relative L2 over all gradients, and the worst tensor);
- keras: the same for the Keras twin;
- twins: the Keras bf16 gradients against the torch bf16 gradients;
- and, first, the two twins' float64 and float32 gradients against each other. In float64
  the twins compute the same function to ~1e-8 whatever the kernels (below 1e-9 on the
  convolutional recipes); in float32 they differ
  by rounding in another order, below 1e-5, except where a ReLU input lies within that
  rounding of 0 and the twins put it on opposite sides of the kink
  (docs/float32-relu-crossings.md: ResNet-18 on the digit images, 4.4e-3 from a single element
  of one batch; how many elements cross depends on the CPU's kernels and thread count).

If the two frameworks round the same operations, the first two agree and the third is of
their size. Run: ``python bench/mixed_precision.py [--precision bf16-mixed] [--batch 32]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo import registry  # noqa: E402
from zoo.data import load_dataset  # noqa: E402
from zoo.recipe import load_recipe  # noqa: E402


def torch_gradients(model, x, y, precision: str) -> dict[str, np.ndarray]:
    import torch
    import torch.nn.functional as F

    if precision == "64-true":  # a float64 copy: the caller's model stays float32
        model, x = copy.deepcopy(model).double(), x.astype(np.float64) if x.dtype.kind == "f" else x
    model.zero_grad()
    context = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bf16-mixed"
        else torch.autocast("cpu", enabled=False)
    )
    with context:
        logits = model(torch.from_numpy(x))
    logits = logits.double() if precision == "64-true" else logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(y).reshape(-1))
    loss.backward()
    return {n: p.grad.double().numpy() for n, p in model.named_parameters()}


def keras_gradients(family, config, tensors, x, y, precision: str) -> dict[str, np.ndarray]:
    from zoo.nn.keras.precision import build_keras

    return keras_model_gradients(build_keras(family, config, precision, tensors), family, config, x, y)


def keras_model_gradients(model, family, config, x, y) -> dict[str, np.ndarray]:
    """The gradients of a built Keras twin, in the canonical (torch) layout. Separate from
    building, so a caller can watch the twin's operations while only the batch runs."""
    import tensorflow as tf

    from zoo.checkpoint.tables import keras_layer
    from zoo.keras.data import keras_layout

    xk = tf.constant(keras_layout(x, family.input_kind))
    with tf.GradientTape() as tape:
        logits = model(xk, training=True)
        logits = tf.cast(logits, "float64" if logits.dtype == tf.float64 else "float32")
        logits = tf.reshape(logits, (-1, logits.shape[-1]))
        labels = tf.reshape(tf.constant(y), (-1,))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    table = family.weight_table(config)
    variables = [keras_layer(keras_layer(model, p.layer), v) for p in table for v in p.variables]
    grads = tape.gradient(loss, variables)
    out, i = {}, 0
    for port in table:
        values = []
        for variable in port.variables:
            g = grads[i]
            i += 1
            values.append(
                np.zeros(keras_layer(keras_layer(model, port.layer), variable).shape)
                if g is None
                else np.asarray(tf.convert_to_tensor(g), dtype=np.float64)
            )
        for spec, array in zip(port.tensors, port.to_torch(*values), strict=True):
            if spec.trainable:
                out[spec.name] = np.asarray(array, dtype=np.float64)
    return out


def distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> tuple[float, str, float]:
    """Relative L2 over all tensors, and the worst tensor's own relative distance."""
    num = sum(float(np.sum((a[k] - b[k]) ** 2)) for k in b)
    den = sum(float(np.sum(b[k] ** 2)) for k in b)
    worst = max(b, key=lambda k: np.linalg.norm(a[k] - b[k]) / max(np.linalg.norm(b[k]), 1e-30))
    return (num / den) ** 0.5, worst, float(np.linalg.norm(a[worst] - b[worst]) / np.linalg.norm(b[worst]))


class Setup(NamedTuple):
    """What both twins start from for one recipe: its model, one batch, torch's initial tensors."""

    family: Any
    config: Any
    seed: int
    x: np.ndarray
    y: np.ndarray
    tensors: dict[str, np.ndarray]


def setup(path: Path, batch: int) -> Setup:
    """The recipe's model with dropout off (masks can never match across frameworks), the
    first ``batch`` training examples, and the tensors the recipe's seed initialises."""
    from zoo.initial_weights import initial_tensors

    recipe = load_recipe(path)
    family = registry.get_family(recipe.model.architecture)
    dataset = load_dataset(recipe.data, family.input_kind)
    config = recipe.model.bind(dataset.info)
    fields = {k: 0.0 for k in type(config).model_fields if "dropout" in k}
    config = config.model_copy(update=fields)
    x, y = dataset.train.x[:batch], dataset.train.y[:batch]
    seed = recipe.trainer.seed
    return Setup(family, config, seed, x, y, initial_tensors(family, config, seed))


def measure(path: Path, precision: str, batch: int) -> dict[str, tuple[float, str, float]]:
    from zoo.initial_weights import seeded_torch_model

    s = setup(path, batch)
    torch_model = seeded_torch_model(s.family, s.config, s.seed).train()
    t32 = torch_gradients(torch_model, s.x, s.y, "32-true")
    tlow = torch_gradients(torch_model, s.x, s.y, precision)
    t64 = torch_gradients(torch_model, s.x, s.y, "64-true")
    k32 = keras_gradients(s.family, s.config, s.tensors, s.x, s.y, "32-true")
    klow = keras_gradients(s.family, s.config, s.tensors, s.x, s.y, precision)
    k64 = keras_gradients(s.family, s.config, s.tensors, s.x, s.y, "64-true")
    return {
        "float64 twins": distance(k64, t64),
        "float32 twins": distance(k32, t32),
        f"torch {precision} vs its float32": distance(tlow, t32),
        f"keras {precision} vs its float32": distance(klow, k32),
        f"keras vs torch at {precision}": distance(klow, tlow),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="bf16-mixed", choices=["bf16-mixed"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("recipes", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.recipes or sorted((ROOT / "recipes").glob("*.yaml"))
    columns = ["float64 twins", "float32 twins", "torch bf16 / f32", "keras bf16 / f32", "keras / torch bf16"]
    print(f"| recipe | {' | '.join(columns)} |")
    print("|---" * (len(columns) + 1) + "|")
    for path in paths:
        rows = measure(path, args.precision, args.batch)
        cells = [f"{d:.2e} (worst {w} {wd:.2e})" for d, w, wd in rows.values()]
        print(f"| {path.stem} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
