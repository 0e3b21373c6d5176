"""Does pre-training on digits 0-4 help on digits 5-9 from one image per class?

Trains recipes/cnn-digits-0to4.yaml once per framework, then for several seeds trains
recipes/cnn-digits-5to9-few.yaml from scratch and fine-tuned from the 0-4 checkpoint of
the *other* framework (the head re-initialised), and prints mean test accuracies.

    .venv/bin/python bench/transfer.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import zoo

ROOT = Path(__file__).resolve().parent.parent
SOURCE, TARGET = ROOT / "recipes" / "cnn-digits-0to4.yaml", ROOT / "recipes" / "cnn-digits-5to9-few.yaml"
COMMON = ["trainer.progress_bar=false", f"export.dir={ROOT / 'bench' / 'out' / 'runs'}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    sources = {fw: zoo.train(SOURCE, fw, COMMON).checkpoint for fw in ("lightning", "keras")}
    lines = [
        "| framework | from scratch | fine-tuned from the other framework's 0-4 model |",
        "|---|---|---|",
    ]
    for framework, other in (("lightning", "keras"), ("keras", "lightning")):
        scratch, tuned = [], []
        for seed in range(args.seeds):
            seeded = [*COMMON, f"trainer.seed={seed}", f"data.split_seed={seed}"]
            scratch.append(zoo.train(TARGET, framework, seeded).metrics["test_accuracy"])
            start = [f"init.from={sources[other]}", "init.reset_head=true"]
            tuned.append(zoo.train(TARGET, framework, [*seeded, *start]).metrics["test_accuracy"])
        lines.append(f"| {framework} | {statistics.mean(scratch):.3f} | {statistics.mean(tuned):.3f} |")
    lines.append(
        f"\nmean test accuracy on digits 5-9 over {args.seeds} seeds (each seed also picks the images)"
    )
    text = "\n".join(lines)
    print(text)
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "transfer.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
