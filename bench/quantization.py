"""Quantization (issue 44): what ``zoo quantize`` saves and costs, side by side with float32.

Two parts, one run:

1. Real-size presets (gpt2, smollm-135m, resnet50, seeded random weights): the checkpoint's
   bytes in float32, int8 and int4 (groups of 32) and their ratios; the seconds ``zoo quantize``
   takes; each twin's load of each file (``zoo.backend.load_checkpoint``, build included, the
   fastest of ``--repeats`` after an untimed first load), quantized against float in one process,
   side by side; and the
   outputs' gap to float32's on a seeded input, as a fraction of their largest magnitude.
2. Quality on the embedded data: the default recipe (cnn-digits) trained once, then evaluated in
   float32, int8 and int4 in both frameworks (test accuracy and loss: the twins give the same).

Today both twins hold a quantized checkpoint's weights as the float32 values its integers stand
for (``zoo.checkpoint.quantized``): the cut is the file's (what is stored, copied and shipped),
not yet the running model's memory, and a load costs the dequantization on top of the read.

    .venv/bin/python bench/quantization.py [--presets gpt2 smollm-135m resnet50] [--repeats 2]
        [--write-results]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from results_section import publish  # bench/ is the script's folder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SECTION = "## Quantization: int8 and int4 checkpoints against float32 (`bench/quantization.py`)"
FRAMEWORKS = ("lightning", "keras")
SCHEMES = ("int8", "int4")


def fastest(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def outputs(model, x: np.ndarray, family) -> np.ndarray:
    import torch

    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return model.eval()(torch.from_numpy(x)).numpy()
    from zoo.keras.data import keras_layout

    return np.asarray(model(keras_layout(x, family.input_kind), training=False))


def preset_rows(name: str, folder: Path, repeats: int) -> list[str]:
    import zoo
    from zoo import registry
    from zoo.backend import load_checkpoint

    family = registry.get_family(name)
    model = zoo.create_model(name, framework="lightning", seed=0)
    x = model.zoo_config.example_input(2, seed=1)
    expected = outputs(model, x, family)
    paths = {"float32": zoo.save_checkpoint(model, folder / f"{name}.safetensors")}
    del model
    seconds = {}
    for scheme in SCHEMES:
        started = time.perf_counter()
        paths[scheme] = zoo.quantize_checkpoint(
            paths["float32"], folder / f"{name}-{scheme}.safetensors", scheme
        ).path
        seconds[scheme] = time.perf_counter() - started
    loads, gaps = {}, {}
    for framework in FRAMEWORKS:
        load_checkpoint(paths["float32"], framework)  # untimed: the framework's first-use costs
        for kind, path in paths.items():
            loads[framework, kind] = fastest(lambda p=path, f=framework: load_checkpoint(p, f), repeats)
            if kind != "float32":
                got = outputs(load_checkpoint(path, framework), x, family)
                gaps[framework, kind] = float(np.abs(got - expected).max() / np.abs(expected).max())
    size = {kind: path.stat().st_size for kind, path in paths.items()}
    rows = []
    for scheme in SCHEMES:
        load = " / ".join(
            f"{loads[f, scheme]:.2f} s ({loads[f, scheme] / loads[f, 'float32']:.2f}x)" for f in FRAMEWORKS
        )
        gap = " / ".join(f"{gaps[f, scheme]:.1e}" for f in FRAMEWORKS)
        rows.append(
            f"| {name} | {scheme} | {size['float32'] / 1e6:.3g} MB -> {size[scheme] / 1e6:.3g} MB "
            f"({size['float32'] / size[scheme]:.2f}x) | {seconds[scheme]:.1f} s | {load} | {gap} |"
        )
    return rows


def quality_rows(folder: Path) -> list[str]:
    import zoo

    recipe = ROOT / "recipes" / "cnn-digits.yaml"
    done = zoo.train(recipe, "lightning", [f"export.dir={folder}", "trainer.progress_bar=false"])
    paths = {"float32": done.checkpoint}
    for scheme in SCHEMES:
        paths[scheme] = zoo.quantize_checkpoint(
            done.checkpoint, folder / f"digits-{scheme}.safetensors", scheme
        ).path
    rows = []
    for kind, path in paths.items():
        metrics = {f: zoo.evaluate(path, recipe, framework=f) for f in FRAMEWORKS}
        cells = " | ".join(
            f"{metrics[f]['test_accuracy']:.4f} / {metrics[f]['test_loss']:.4f}" for f in FRAMEWORKS
        )
        rows.append(f"| cnn-digits (convnet-small) | {kind} | {cells} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["gpt2", "smollm-135m", "resnet50"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-quality", action="store_true", help="skip the trained digits model")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        lines = [
            f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores. Loads: build included, the fastest of "
            f"{args.repeats}, and against the float32 file's load in the same twin; gap: the outputs' "
            "largest difference from float32's over their largest magnitude (seeded random weights).",
            "",
            "| preset | scheme | file | zoo quantize | load, Lightning / Keras | gap, Lightning / Keras |",
            "|---|---|---|---|---|---|",
        ]
        for name in args.presets:
            lines += preset_rows(name, folder, args.repeats)
        if not args.no_quality:
            lines += [
                "",
                "Trained on the embedded digits (the default recipe), evaluated on its test split:",
                "",
                "| model | weights | test accuracy / loss, Lightning | Keras |",
                "|---|---|---|---|",
                *quality_rows(folder),
            ]
    return publish(SECTION, "\n".join(lines), args.write_results)


if __name__ == "__main__":
    raise SystemExit(main())
