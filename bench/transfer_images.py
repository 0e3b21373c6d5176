"""Transfer learning as users do it: a ResNet-18 from a torchvision file, fine-tuned on a few images.

Step 1 trains recipes/resnet18-digits32-0to4.yaml (digits 0-4 as 32x32 RGB PNG files) once in
Lightning and exports it in torchvision's layout (``zoo export --format torchvision``): the
stand-in for published weights, since nothing may be downloaded. Step 2 imports that file
(``zoo import``) and, in each framework and for several seeds, trains
recipes/resnet18-digits32-5to9-few.yaml (digits 5-9, five images per class):

- from scratch;
- fine-tuned with the backbone frozen (its BatchNorm statistics included) and the new head at
  its own learning rate;
- fine-tuned end to end, the head at its own learning rate.

It prints mean test accuracies and writes them to bench/out/transfer_images.md.

    .venv/bin/python bench/transfer_images.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

import zoo

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "recipes" / "resnet18-digits32-0to4.yaml"
TARGET = ROOT / "recipes" / "resnet18-digits32-5to9-few.yaml"
OUT = ROOT / "bench" / "out"
COMMON = ["trainer.progress_bar=false", f"export.dir={OUT / 'runs'}"]
HEAD_LR = 0.01
STARTS = {
    "from scratch": [],
    "fine-tuned, backbone frozen": ["init.freeze_backbone=true", f"init.head_lr={HEAD_LR}"],
    "fine-tuned, all layers": [f"init.head_lr={HEAD_LR}"],
}


def published_weights() -> Path:
    """The 0-4 model as a torchvision state dict, imported back as a zoo checkpoint."""
    source = zoo.train(SOURCE, "lightning", COMMON)
    print(f"source (digits 0-4): test accuracy {source.metrics['test_accuracy']:.4f}", flush=True)
    pth = zoo.export_checkpoint(source.checkpoint, "torchvision", OUT / "resnet18-digits.pth", overwrite=True)
    imported = zoo.import_checkpoint(pth, OUT / "resnet18-imported.safetensors", overwrite=True)
    exported, back = load_file(source.checkpoint), load_file(imported.path)
    assert all(np.array_equal(exported[k], back[k]) for k in exported), "export -> import changed a tensor"
    return imported.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    start = published_weights()
    lines = ["| framework | " + " | ".join(STARTS) + " |", "|---|" + "---|" * len(STARTS)]
    for framework in ("lightning", "keras"):
        means = []
        for how, overrides in STARTS.items():
            init = [f"init.from={start}", *overrides] if overrides else []
            accuracies = []
            for seed in range(args.seeds):
                seeded = [*COMMON, f"trainer.seed={seed}", f"data.split_seed={seed}", *init]
                accuracies.append(zoo.train(TARGET, framework, seeded).metrics["test_accuracy"])
            means.append(statistics.mean(accuracies))
            print(f"{framework}, {how}: {accuracies}", flush=True)
        lines.append(f"| {framework} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
    text = (
        f"Mean test accuracy on digits 5-9 (32x32 RGB files, 5 training images per class) over "
        f"{args.seeds} seeds; fine-tuned runs start from the digits 0-4 ResNet-18 exported in "
        "torchvision's layout and imported back.\n\n" + "\n".join(lines) + "\n"
    )
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "transfer_images.md").write_text(text)


if __name__ == "__main__":
    main()
