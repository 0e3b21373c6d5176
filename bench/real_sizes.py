"""Does zoo cost anything over a hand-written loop at real sizes? Issue 18, item 1.

For each preset at its published input size, four ways to train the same model on the
same synthetic data (images and token ids drawn from a seed: nothing downloaded), with the
same loss, the same optimizer (AdamW, lr 1e-4, weight decay 0.01 on every tensor, constant
rate), float32, one thread, each in a fresh process:

  raw-torch      zoo.create_model(..., framework="lightning", seed=0), then model(x), loss,
                 backward, AdamW step over zoo's batch order (no Lightning)
  zoo-lightning  zoo.train(recipe, "lightning"): the LightningModule, Trainer and callbacks
                 `zoo train` uses (progress bar, metrics log, state saved at epoch ends)
  plain-keras    zoo.create_model(..., framework="keras", seed=0), model.compile(AdamW, sparse
                 cross-entropy) + model.fit on the numpy arrays
  zoo-keras      zoo.train(recipe, "keras")

Every way trains ``--epochs`` epochs of ``--steps`` steps; an epoch's time is the framework's
own (zoo's metrics row, a callback for the hand-written ways). Samples/s is the fastest epoch
after the first (warm-up, tracing) over ``--rounds`` interleaved rounds: on a shared machine
other work only ever slows a run down, so the fastest epoch is the closest to the way's own
cost (bench/speed.py's method). At a few steps an epoch, zoo's per-epoch work (the first
batch's fetch, the epoch's metrics) is counted at full weight: the ratios are a lower bound
of what a long epoch sees. zoo's training state, saved at every epoch end, is written after
zoo's epoch clock stops: not in these figures (bench/RESULTS.md gives its cost).

Writes bench/out/real_sizes.md (and each run as it ends to bench/out/real_sizes.jsonl) and
with ``--write-results``, its section of bench/RESULTS.md.

    .venv/bin/python bench/real_sizes.py [--presets resnet18,gpt2,...] [--steps 2]
                                         [--epochs 3] [--rounds 1] [--write-results]

The defaults (two measured epochs of 2 steps in one process per way) took 28 minutes for
every preset on 2 cores shared with other work (load average 3-4): a process's fixed costs
(imports, building and seeding the twin, Keras' tracing, zoo's test and export) are most of
it. ``--rounds 3`` gives steadier figures at three times the cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's zoo, whichever one the environment installed

from zoo.progress import bar  # noqa: E402

HEADING = "## Overhead at real sizes (`bench/real_sizes.py`)"

# The sizes. Images: classes of the data set the input size comes from (CIFAR-10 at
# 32x32, ImageNet at 224). Language models: their tokenizers' vocabularies (GPT-2's BPE,
# SmolLM's 49,152-token BPE, BERT's WordPiece, Penn Treebank's 10,000 words with Zaremba et
# al.'s 35 steps x 20).
PRESETS: dict[str, dict] = {
    "resnet18": {"kind": "image", "size": 32, "batch": 64, "classes": 10},
    "resnet50": {"kind": "image", "size": 224, "batch": 8, "classes": 1000},
    "vit-tiny": {"kind": "image", "size": 224, "batch": 16, "classes": 1000},
    "convnext-tiny": {"kind": "image", "size": 224, "batch": 8, "classes": 1000},
    "gpt2": {"kind": "language_modeling", "seq": 256, "batch": 4, "vocab": 50257},
    "smollm-135m": {"kind": "language_modeling", "seq": 256, "batch": 4, "vocab": 49152},
    "bert-base": {"kind": "masked_language_modeling", "seq": 128, "batch": 8, "vocab": 30522},
    "lstm-medium-lm": {"kind": "language_modeling", "seq": 35, "batch": 20, "vocab": 10000},
}
WAYS = ("raw-torch", "zoo-lightning", "plain-keras", "zoo-keras")
PREAMBLE = """```bash
.venv/bin/python bench/real_sizes.py                       # every preset, ~30 min on 2 busy cores
.venv/bin/python bench/real_sizes.py --presets resnet18,gpt2 --steps 4 --rounds 3
```

The issue's sizes, float32, AdamW (lr 1e-4, decay 0.01 on every tensor, constant rate), one
thread, on synthetic data drawn from a seed (random images; random token ids over the
preset's vocabulary, through a word-level tokenizer.json). *raw torch*: the torch twin
(`zoo.create_model(..., seed=0)`) in a hand-written loop; *zoo lightning* / *zoo keras*:
`zoo.train` on a recipe of that data (the Trainer, callbacks, progress bar, metrics log and
the state saved at every epoch end that `zoo train` has); *plain keras*: the Keras twin with
`compile(AdamW, SparseCategoricalCrossentropy)` + `fit` on the numpy arrays. ImageNet-sized
heads (1000 classes) at 224, 10 classes at 32x32; the LSTM LM is Zaremba et al.'s medium
model at their 35 steps x 20, a 10,000-word vocabulary; bert-base trains its masked-LM head.
"""
LR, WEIGHT_DECAY, SEED = 1e-4, 0.01, 0
SPECIAL = ("[PAD]", "<|endoftext|>", "[CLS]", "[SEP]", "[MASK]", "[UNK]")


def input_words(spec: dict) -> str:
    if spec["kind"] == "image":
        return f"{spec['size']}x{spec['size']}"
    return f"seq {spec['seq']}"


# ------------------------------------------------------------------------------ data


def write_data(preset: str, steps: int, folder: Path, spec: dict | None = None) -> Path:
    """The preset's synthetic data under ``folder``, from a seed: an .npz of images, or a text
    of words ``w<id>`` with a word-level tokenizer.json of the preset's vocabulary. The
    training split is exactly ``steps`` batches; the test split one batch. ``spec``: sizes
    other than :data:`PRESETS`' (bench/gpu.py's)."""
    spec = spec or PRESETS[preset]
    rng = np.random.default_rng(SEED)
    folder.mkdir(parents=True, exist_ok=True)
    batch = spec["batch"]
    if spec["kind"] == "image":
        shape = (3, spec["size"], spec["size"])
        path = folder / "images.npz"
        labels = rng.integers(0, spec["classes"], steps * batch)
        labels[0] = spec["classes"] - 1  # zoo takes the classes from the largest label
        np.savez(
            path,
            x_train=rng.standard_normal((steps * batch, *shape), dtype=np.float32),
            y_train=labels,
            x_test=rng.standard_normal((batch, *shape), dtype=np.float32),
            y_test=rng.integers(0, spec["classes"], batch),
        )
        return path
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(SPECIAL)}
    vocab |= {f"w{i}": i for i in range(len(SPECIAL), spec["vocab"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(list(SPECIAL))
    tokenizer.save(str(folder / "tokenizer.json"))
    seq = spec["seq"]
    # Next-token windows overlap by one token; masked-LM blocks do not.
    extra = 1 if spec["kind"] == "language_modeling" else 0
    n_train, n_test = steps * batch * seq + extra, seq + extra  # the test split: one sample
    ids = rng.integers(len(SPECIAL), spec["vocab"], n_train + n_test)
    (folder / "text.txt").write_text(" ".join(f"w{i}" for i in ids))
    return folder / "text.txt"


def recipe_for(
    preset: str, data: Path, epochs: int, export: Path, spec: dict | None = None, trainer: dict | None = None
) -> dict:
    """The recipe of ``zoo.train``'s ways; ``trainer`` overrides its trainer section (bench/gpu.py:
    accelerator, precision, gradient checkpointing)."""
    spec = spec or PRESETS[preset]
    batch = spec["batch"]
    common = {"path": str(data), "batch_size": batch, "eval_batch_size": batch, "val_fraction": 0}
    if spec["kind"] == "image":
        model = {"architecture": preset, "num_classes": spec["classes"]}
        section = {"name": "npz", **common}
    else:
        model = {"architecture": preset}
        extra = 1 if spec["kind"] == "language_modeling" else 0
        n_tokens = data.read_text().count(" ") + 1
        n_test = spec["seq"] + extra
        # zoo takes int(tokens * test_fraction) for the test split: a fraction half a token
        # above the exact one rounds down to it.
        fraction = (n_test + 0.5) / n_tokens
        section = {
            "name": "text", **common, "tokenizer": str(data.parent / "tokenizer.json"),
            "seq_len": spec["seq"], "task": spec["kind"], "test_fraction": fraction,
        }  # fmt: skip
    trainer = {
        "max_epochs": epochs, "num_threads": 1, "seed": SEED, "accelerator": "cpu",
        "precision": "32-true", "progress_bar": True, **(trainer or {}),
    }  # fmt: skip
    return {
        "model": model,
        "data": section,
        "optimizer": {"name": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY},
        "schedule": {"name": "constant"},
        "trainer": trainer,
        "export": {"dir": str(export)},
    }


# ------------------------------------------------------------------------- the ways


def measure(way: str, preset: str, data: Path, epochs: int) -> dict:
    """Runs in a fresh process: one way of training, epoch times in seconds."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import zoo
    from zoo import registry
    from zoo.data import load_dataset

    export = Path(tempfile.mkdtemp(prefix="zoo-real-sizes-"))
    try:
        recipe = zoo.load_recipe(recipe_for(preset, data, epochs, export))
        family = registry.get_family(recipe.model.architecture)
        dataset = load_dataset(recipe.data, family.input_kind)
        config = recipe.model.bind(dataset.info)
        if way.startswith("zoo-"):
            result = zoo.train(recipe, way.removeprefix("zoo-"))
            times = [float(r["epoch_seconds"]) for r in result.history]
        elif way == "raw-torch":
            times = raw_torch(preset, family, config, dataset, epochs)
        else:
            times = plain_keras(preset, family, config, dataset, epochs)
    finally:
        shutil.rmtree(export, ignore_errors=True)
    return {"times": times, "samples": len(dataset.train)}


def model_fields(config) -> dict:
    return config.model_dump()


def raw_torch(
    preset, family, config, dataset, epochs: int, *, batch: int | None = None, precision: str = "32-true",
    device: str = "cpu", threads: int | None = 1, checkpointing: bool = False, compile: bool = False,
) -> list[float]:  # fmt: skip
    """The hand-written loop. The keywords are bench/gpu.py's: on a GPU, mixed precision is
    ``torch.autocast`` (and ``torch.amp.GradScaler`` for 16-mixed), each batch copied to the
    device as Lightning does, the epoch clock stopped after ``torch.cuda.synchronize``;
    ``compile``: the model under ``torch.compile``."""
    import torch
    import torch.nn.functional as F

    import zoo
    from zoo.data import IGNORE_INDEX, epoch_batches

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    model = zoo.create_model(preset, framework="lightning", seed=SEED, **model_fields(config))
    model = model.to(device).train()
    family.set_grad_checkpointing(model, "lightning", checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    if compile:
        model = torch.compile(model)
    autocast = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    kind = torch.device(device).type
    scaler = torch.amp.GradScaler(kind, enabled=precision == "16-mixed")
    split, batch = dataset.train, batch or PRESETS[preset]["batch"]
    x, y = torch.from_numpy(split.x), torch.from_numpy(split.y)
    times = []
    for epoch in range(epochs):
        started = time.perf_counter()
        for index in epoch_batches(len(y), batch, SEED, epoch):
            if split.masking is not None:  # BERT's masks, drawn per batch as zoo's loader does
                inputs, labels = split.masking.apply(split.x[index], index, SEED, epoch)
                inputs, labels = torch.from_numpy(inputs), torch.from_numpy(labels)
            else:
                inputs, labels = x[torch.from_numpy(index)], y[torch.from_numpy(index)]
            inputs, labels = inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            with torch.autocast(kind, dtype=autocast, enabled=autocast is not None):
                logits = model(inputs)
            logits = logits.float()
            loss = F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()  # without a scaler (all but 16-mixed): loss.backward()
            scaler.step(optimizer)
            scaler.update()
        if kind == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return times


def plain_keras(
    preset, family, config, dataset, epochs: int, *, batch: int | None = None, precision: str = "32-true",
    threads: int | None = 1, checkpointing: bool = False, jit_compile: bool = False,
) -> list[float]:  # fmt: skip
    """``compile`` + ``fit``, with XLA only if ``jit_compile`` as zoo's recipes (Keras' own
    default, "auto", turns XLA on wherever there is a GPU). The other keywords are
    bench/gpu.py's: GPUs get memory growth; a mixed precision is the twin's dtype policy
    (zoo's: the product layers get ``mixed_bfloat16`` / ``mixed_float16``, docs/precision.md),
    and under 16-mixed the optimizer is wrapped in ``keras.optimizers.LossScaleOptimizer``."""
    import keras
    import tensorflow as tf

    import zoo
    from zoo.data import IGNORE_INDEX
    from zoo.keras.data import keras_layout

    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    keras.utils.set_random_seed(SEED)
    if precision == "32-true":
        model = zoo.create_model(preset, framework="keras", seed=SEED, **model_fields(config))
    else:
        from zoo.initial_weights import initial_tensors
        from zoo.nn.keras.precision import build_keras

        model = build_keras(family, config, precision, initial_tensors(family, config, SEED))
    family.set_grad_checkpointing(model, "keras", checkpointing)
    optimizer = keras.optimizers.AdamW(LR, weight_decay=WEIGHT_DECAY, epsilon=1e-8)
    if precision == "16-mixed":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE_INDEX),
        jit_compile=jit_compile,
    )
    split = dataset.train
    x, y = keras_layout(split.x, family.input_kind), split.y
    if split.masking is not None:  # numpy arrays: one draw of BERT's masks for every epoch
        x, y = split.masking.apply(split.x, np.arange(len(split.x)), SEED, 0)
    times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.started)

    batch = batch or PRESETS[preset]["batch"]
    model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, callbacks=[Timer()])
    return times


# ---------------------------------------------------------------------------- runs


def run_one(way: str, preset: str, data: Path, epochs: int) -> dict:
    command = [sys.executable, __file__, "--one", way, "--presets", preset, "--data", str(data)]
    command += ["--epochs", str(epochs)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"{way} {preset} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def samples_per_second(result: dict) -> float:
    return result["samples"] / min(result["times"][1:])


def figure(value: float) -> str:
    if value != value:
        return "failed"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", help=f"comma-separated (default: {','.join(PRESETS)})")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="per run; the first is warm-up")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--write-results", action="store_true", help="rewrite this section of RESULTS.md")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch is warm-up")
    if args.one:
        print(json.dumps(measure(args.one, args.presets, Path(args.data), args.epochs)))
        return
    presets = args.presets.split(",") if args.presets else list(PRESETS)
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:
        parser.error(f"unknown presets {unknown}; choose from {', '.join(PRESETS)}")
    lines = [
        PREAMBLE,
        "| preset | input | batch | raw torch | zoo lightning | ratio | plain keras | zoo keras "
        "| ratio | lightning/keras |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst = []
    started = time.perf_counter()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    log = out / "real_sizes.jsonl"
    log.write_text("")
    shown = bar(len(presets) * args.rounds * len(WAYS), "real sizes", unit="run")
    with tempfile.TemporaryDirectory(prefix="zoo-real-sizes-data-") as scratch:
        for preset in presets:
            spec = PRESETS[preset]
            data = write_data(preset, args.steps, Path(scratch) / preset)
            rounds = []
            for _ in range(args.rounds):
                measured = {}
                for way in WAYS:
                    shown.set_postfix_str(f"{preset} {way}")
                    try:
                        result = run_one(way, preset, data, args.epochs)
                        measured[way] = samples_per_second(result)
                    except (RuntimeError, subprocess.TimeoutExpired) as error:
                        # One way failing leaves the other presets' figures standing.
                        print(error, file=sys.stderr)
                        result, measured[way] = {"error": str(error)[-500:]}, float("nan")
                    shown.update(1)
                    # Each run as it ends, for a run cut short.
                    with log.open("a") as file:
                        file.write(json.dumps({"preset": preset, "way": way, **result}) + "\n")
                rounds.append(measured)
            # A failed run is nan; a way that failed in every round stays nan.
            speed = {w: max((r[w] for r in rounds if r[w] == r[w]), default=float("nan")) for w in WAYS}
            lightning = speed["zoo-lightning"] / speed["raw-torch"]
            keras = speed["zoo-keras"] / speed["plain-keras"]
            cross = speed["zoo-lightning"] / speed["zoo-keras"]
            worst += [(r, f"{preset} {w}") for r, w in ((lightning, "lightning"), (keras, "keras")) if r == r]
            cells = [preset, input_words(spec), spec["batch"], *(figure(speed[w]) for w in WAYS[:2])]
            cells += [f"{lightning:.2f}", *(figure(speed[w]) for w in WAYS[2:])]
            cells += [f"{keras:.2f}", f"{cross:.2f}"]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    shown.close()
    load = os.getloadavg()[0]
    lines.append(
        f"\nsamples/s: the fastest epoch ({args.steps} steps; epochs 2-{args.epochs}) of "
        f"{args.rounds} interleaved rounds of fresh processes; 1 thread, float32, AdamW; "
        f"{(time.perf_counter() - started) / 60:.0f} min, load average {load:.1f} at the end"
    )
    if worst:
        low = min(worst)
        lines.append(f"\nworst zoo / hand-written ratio: {low[0]:.3f} ({low[1]})")
    text = "\n".join(lines)
    print(text)
    (out / "real_sizes.md").write_text(text + "\n")
    if args.write_results:
        from results_section import write_section

        write_section(HEADING, text)


if __name__ == "__main__":
    main()
