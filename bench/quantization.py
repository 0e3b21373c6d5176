"""Quantization (issue 44): what ``zoo quantize`` saves and costs, side by side with float32.

Two parts, one run:

1. Real-size presets (gpt2, smollm-135m, resnet50, seeded random weights): the checkpoint's
   bytes in float32, int8 and int4 (groups of 32) and their ratios; the seconds ``zoo quantize``
   takes; and per twin, in one process side by side: the bytes its tensors hold once loaded
   (``zoo.backend.load_checkpoint``: a quantized file's weights stay integers, made into float32
   when a layer reads them: zoo.nn.{torch,keras}.quantized), the load (build included), one
   forward pass, and the outputs' gap to float32's, as a fraction of their largest magnitude.
   Beside them, each framework's own int8 on the float twin: torchao's int8 weight-only
   (``nn.Linear`` layers; the ``bench`` extra) and Keras' ``quantize("int8")`` (``Dense`` layers,
   their inputs quantized too).
2. Quality on the embedded data: the default recipe (cnn-digits) trained once, then evaluated in
   float32, int8 and int4 in both frameworks (test accuracy and loss: the twins give the same).

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
from typing import NamedTuple
from unittest import mock

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
    """One row per weights (float32, zoo's int8 and int4, and the libraries' own int8 beside
    them): the file, ``zoo quantize``'s time, and per twin the bytes its weights hold once
    loaded, the load, one forward pass and the outputs' gap to float32's."""
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
    found: dict[tuple[str, str], Measured | None] = {}
    for framework in FRAMEWORKS:
        load_checkpoint(paths["float32"], framework)  # untimed: the framework's first-use costs
        for kind, path in paths.items():
            load = fastest(lambda p=path, f=framework: load_checkpoint(p, f), repeats)
            found[framework, kind] = measured(
                load_checkpoint(path, framework), x, family, expected, repeats, load
            )
        found[framework, LIBRARY[framework]] = library_int8(
            load_checkpoint(paths["float32"], framework), x, family, expected, repeats
        )
    size = {kind: path.stat().st_size for kind, path in paths.items()}
    rows = []
    for kind in (*paths, *LIBRARY.values()):
        cells = []
        for column in ("held", "load", "forward", "gap"):
            base = {f: getattr(found[f, "float32"], column) for f in FRAMEWORKS}
            cells.append(" / ".join(
                "-" if found.get((f, kind)) is None or getattr(found[f, kind], column) is None
                else cell(column, getattr(found[f, kind], column), base[f], kind == "float32")
                for f in FRAMEWORKS
            ))  # fmt: skip
        whole = f"{size['float32'] / 1e6:.3g} MB"
        file = whole if kind == "float32" else "-"
        if kind in SCHEMES:
            file = f"{whole} -> {size[kind] / 1e6:.3g} MB ({size['float32'] / size[kind]:.2f}x)"
        quantize = f"{seconds[kind]:.1f} s" if kind in SCHEMES else "-"
        rows.append(f"| {name} | {kind} | {file} | {quantize} | " + " | ".join(cells) + " |")
    return rows


class Measured(NamedTuple):
    held: int  # bytes of the tensors the twin holds
    load: float | None  # seconds
    forward: float  # seconds, the fastest pass
    gap: float | None  # largest difference from float32's outputs over their largest magnitude


def measured(model, x, family, expected, repeats: int, load: float | None = None) -> Measured:
    got = outputs(model, x, family)
    gap = float(np.abs(got - expected).max() / np.abs(expected).max())
    return Measured(held_bytes(model), load, fastest(lambda: outputs(model, x, family), repeats), gap)


def cell(column: str, value: float, base: float, baseline: bool) -> str:
    if column == "gap":
        return "0" if baseline else f"{value:.1e}"
    said = f"{value / 1e6:.3g} MB" if column == "held" else f"{value * 1e3:.0f} ms"
    return said if baseline else f"{said} ({base / value:.2f}x)"


def held_bytes(model) -> int:
    """What a twin's tensors hold, each once (a tensor subclass's inner tensors, for torchao)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        from zoo.nn.keras.quantized import held_bytes as keras_held_bytes

        return keras_held_bytes(model)

    def nbytes(tensor) -> int:
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) and hasattr(tensor, "__tensor_flatten__"):
            return sum(nbytes(getattr(tensor, inner)) for inner in tensor.__tensor_flatten__()[0])
        return tensor.numel() * tensor.element_size()

    return sum(nbytes(t) for t in {id(t): t for t in [*model.parameters(), *model.buffers()]}.values())


LIBRARY = {"lightning": "int8, torchao", "keras": "int8, Keras' quantize"}


def library_int8(model, x, family, expected, repeats: int) -> Measured | None:
    """The framework's own int8 on the float twin: torchao's ``Int8WeightOnlyConfig`` (every
    ``nn.Linear``; not installed: None) or Keras' ``quantize("int8")`` on every ``Dense`` (which
    quantizes each layer's inputs too; zoo's tied embeddings stay float, as Keras' int8 Embedding
    hands a tied head its integers)."""
    import torch

    if isinstance(model, torch.nn.Module):
        try:
            from torchao.quantization import Int8WeightOnlyConfig, quantize_
        except ImportError:
            return None
        quantize_(model.eval(), Int8WeightOnlyConfig())
        return measured(model, x, family, expected, repeats)
    import keras

    with mock.patch("gc.collect"):  # Keras collects after each variable it deletes: minutes for smollm
        for layer in model._flatten_layers():
            if isinstance(layer, keras.layers.Dense):
                layer.quantize("int8", type_check=False)
    return measured(model, x, family, expected, repeats)


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
            f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores. Held: the bytes of the tensors a twin "
            "holds once loaded. Load (build included) and forward (a batch of 2, eager): the fastest of "
            f"{args.repeats}. In brackets: float32's over this one's, in the same twin. Gap: the outputs' "
            "largest difference from float32's over their largest magnitude (seeded random weights).",
            "",
            "| preset | weights | file | zoo quantize | held, Lightning / Keras | load | forward | gap |",
            "|---|---|---|---|---|---|---|---|",
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
