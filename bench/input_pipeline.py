"""What does decoding images from disk cost a training run? Steps/s side by side, one run.

Generates ``--images`` photograph-like pictures (smooth colour fields with noise,
``--source-size`` px high, 5:4, 10 classes) twice, as JPEG (quality 90) and as PNG, and
trains a tiny CNN (8 channels of 1x1 convolutions, global average pooling: the input
pipeline is what is measured, not the model) at ``--image-size`` px (resized to
``image_size / 0.875``, centre-cropped) with ``zoo train`` in each framework, each way in a
fresh process:

  cached        the same pixels decoded once into an ``.npz`` (the in-memory path)
  png           image_folder on the PNGs
  jpeg          image_folder on the JPEGs
  jpeg+augment  image_folder on the JPEGs, RandomResizedCrop + horizontal flip
  jpeg serial   as jpeg with data.workers=0 (decoding in the training process)

The decoding ways use ``data.workers`` = the CPU count (at most 8): torch DataLoader worker
processes, tf.data parallel map calls. The model's kernels run on one thread
(``trainer.num_threads=1``): two-thread kernels on a shared 2-core machine stall whenever the
other core is busy (measured: torch steps of 15 ms or 250 ms at random), and the other cores
are the decoders'. Steps/s is each way's fastest epoch after the first
(start-up and tracing excluded) over ``--rounds`` interleaved rounds; the ratio is to the
same framework's cached steps/s. "loader alone" is the same pipeline iterated without a
model (zoo's torch loader, zoo's tf.data stream): batches/s, what decoding could deliver to
a model that took no time. Validation is off. Prints the table and writes it to
bench/out/input_pipeline-<image size>.md.

    .venv/bin/python bench/input_pipeline.py [--image-size 224] [--images 384] [--epochs 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
WORK = OUT / "input_pipeline"
FRAMEWORKS = ("lightning", "keras")
WAYS = ("cached", "png", "jpeg", "jpeg+augment", "jpeg serial")
# 1x1 convolutions (8 channels) averaged over the image: the cheapest model of the cnn family.
MODEL = {
    "architecture": "cnn", "channels": [8], "kernel_size": 1, "downsample": "none", "head": "avgpool",
    "hidden": None,
}  # fmt: skip


def write_folders(images: int, size: int) -> dict[str, Path]:
    """The same pictures as JPEG and PNG in 10 class folders; kept between runs with the same settings."""
    from PIL import Image

    folders = {kind: WORK / f"{kind}-{images}-{size}" for kind in ("jpeg", "png")}
    stamp = WORK / f"folders-{images}-{size}.done"
    if stamp.is_file():
        return folders
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:size, 0 : size * 5 // 4] / size
    for i in range(images):
        label = i % 10
        phase = rng.uniform(0, 2 * np.pi, 3)
        field = np.stack([np.sin(3 * x * (c + 1) + 2 * y * label / 10 + phase[c]) for c in range(3)], -1)
        picture = ((field * 0.4 + 0.5) * 255 + rng.normal(0, 12, field.shape)).clip(0, 255).astype(np.uint8)
        for kind, folder in folders.items():
            target = folder / f"class{label}"
            target.mkdir(parents=True, exist_ok=True)
            options = {"quality": 90} if kind == "jpeg" else {}
            Image.fromarray(picture).save(target / f"{i:05d}.{'jpg' if kind == 'jpeg' else 'png'}", **options)
    stamp.write_text("done")
    return folders


def image_data(root: Path, size: int, batch_size: int, **fields) -> dict:
    return {
        "name": "image_folder", "root": str(root), "image_size": size, "resize": round(size / 0.875),
        "batch_size": batch_size, "val_fraction": 0.0, "test_fraction": 0.1, **fields,
    }  # fmt: skip


def write_cache(folder: Path, size: int, batch_size: int) -> Path:
    """The JPEG folder's training and test splits decoded once (eval transform) into an .npz."""
    from zoo.data import load_dataset
    from zoo.recipe.image_data import ImageFolderData

    path = WORK / f"cached-{folder.name}-{size}.npz"
    if path.is_file():
        return path
    data = load_dataset(ImageFolderData(**image_data(folder, size, batch_size)), "image")
    splits = {"train": data.train, "test": data.test}
    arrays = {f"x_{name}": split.x[np.arange(len(split))] for name, split in splits.items()}
    np.savez(path, **arrays, **{f"y_{name}": split.y for name, split in splits.items()})
    return path


def recipe(way: str, folders: dict[str, Path], cache: Path, args) -> dict:
    size, batch = args.image_size, args.batch_size
    if way == "cached":
        data = {"name": "npz", "path": str(cache), "val_fraction": 0.0, "batch_size": batch}
    elif way == "png":
        data = image_data(folders["png"], size, batch)
    elif way == "jpeg+augment":
        data = image_data(folders["jpeg"], size, batch, augment=True)
    else:
        data = image_data(folders["jpeg"], size, batch, **({"workers": 0} if way == "jpeg serial" else {}))
    return {
        "name": "input-pipeline", "model": MODEL, "data": data,
        "trainer": {"max_epochs": args.epochs, "progress_bar": False, "num_threads": 1},
        "export": {"dir": str(WORK / "runs")},
    }  # fmt: skip


def train_epochs(spec: dict, framework: str) -> tuple[list[float], int]:
    """Epoch seconds and batches per epoch of ``zoo train`` (its API) on the recipe."""
    import zoo

    result = zoo.train(spec, framework=framework)
    return [float(r["epoch_seconds"]) for r in result.history], int(result.history[0]["step"])


def loader_epochs(spec: dict, framework: str) -> tuple[list[float], int]:
    """Epoch seconds of zoo's own training pipeline for the framework, iterated without a model."""
    import zoo
    from zoo.data import load_dataset, steps_per_epoch

    recipe = zoo.load_recipe(spec)
    data, batch, epochs = (
        load_dataset(recipe.data, "image"),
        recipe.data.batch_size,
        recipe.trainer.max_epochs,
    )
    batches = steps_per_epoch(len(data.train), batch)
    times = []
    if framework == "lightning":
        from zoo.lightning.data import loader

        torch_loader = loader(data.train, batch, seed=0, shuffle=True)
        for epoch in range(epochs):
            torch_loader.sampler.set_epoch(epoch)
            started = time.perf_counter()
            for _ in torch_loader:
                pass
            times.append(time.perf_counter() - started)
    else:
        from zoo.keras.data import train_dataset

        stream = iter(train_dataset(data.train, batch, 0, True, epochs, "image"))
        for _ in range(epochs):
            started = time.perf_counter()
            for _ in range(batches):
                next(stream)
            times.append(time.perf_counter() - started)
    return times, batches


def run_one(spec: dict, framework: str, alone: bool) -> float:
    """Steps/s (or batches/s alone) of the fastest epoch after the first, in a fresh process."""
    command = [sys.executable, __file__, "--one", json.dumps(spec), "--framework", framework]
    done = subprocess.run(command + (["--alone"] if alone else []), capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"{framework} {spec['data']} failed:\n{done.stderr[-3000:]}")
    times, batches = json.loads(done.stdout.strip().splitlines()[-1])
    return batches / min(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--image-size", type=int, default=224, help="side of the model's input")
    parser.add_argument("--images", type=int, default=384)
    parser.add_argument("--source-size", type=int, default=320, help="height of the generated pictures")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--framework", help=argparse.SUPPRESS)
    parser.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        measure = loader_epochs if args.alone else train_epochs
        print(json.dumps(measure(json.loads(args.one), args.framework)))
        return
    WORK.mkdir(parents=True, exist_ok=True)
    folders = write_folders(args.images, args.source_size)
    cache = write_cache(folders["jpeg"], args.image_size, args.batch_size)
    best: dict[tuple[str, str, bool], float] = {}
    for _ in range(args.rounds):
        for way in WAYS:
            spec = recipe(way, folders, cache, args)
            for framework in FRAMEWORKS:
                for alone in (False, True):
                    speed = run_one(spec, framework, alone)
                    key = (way, framework, alone)
                    best[key] = max(best.get(key, 0.0), speed)
                    unit = "batches/s alone" if alone else "steps/s"
                    print(f"{way:>13} {framework:>9}: {speed:8.2f} {unit}", file=sys.stderr)
    lines = [
        "| way | lightning steps/s | ratio to cached | loader alone, batches/s | keras steps/s "
        "| ratio to cached | tf.data alone, batches/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for way in WAYS:
        cells = [way]
        for framework in FRAMEWORKS:
            speed, alone = best[way, framework, False], best[way, framework, True]
            cells += [f"{speed:.2f}", f"{speed / best['cached', framework, False]:.2f}", f"{alone:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    workers = min(8, os.cpu_count() or 1)
    lines.append(
        f"\n{args.images} pictures of {args.source_size * 5 // 4}x{args.source_size} px to "
        f"{args.image_size} px, batch {args.batch_size}, a CNN of 1x1 convolutions on 1 thread; the "
        f"fastest epoch (2-{args.epochs}) of {args.rounds} round(s); {workers} decoding workers / "
        f"parallel calls ({os.cpu_count()} CPUs); validation off"
    )
    text = "\n".join(lines)
    print(text)
    (OUT / f"input_pipeline-{args.image_size}.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
