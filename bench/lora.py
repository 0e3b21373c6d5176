"""LoRA against full fine-tuning: trainable parameters, peak memory, step time, adapter size.

For gpt2 (124M) and a SmolLM-135M shape (llama family), each twin is trained a few AdamW steps
on random token windows twice: every weight trainable (full), and rank-8 adapters on the
attention's q, k, v and output projections with the base frozen (LoRA, the families' default
targets). Each case runs in a fresh process, so its peak resident memory (``ru_maxrss``) is
its own: the growth from just before the first step to the end is what training added
(gradients, optimizer state, activations). Step time is the median after a warm-up step. The
adapter file is what ``zoo train`` writes for the LoRA case (A and B in float32).

Run: ``python bench/lora.py [--steps 4] [--batch 2] [--seq 64] [--write]``; ``--write`` puts the
table in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = {"gpt2": "gpt2", "smollm-135m": "smollm-135m"}
RANK = 8


def rss_mib() -> float:
    """The process's resident memory now (Linux /proc), MiB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def case(preset: str, framework: str, lora: bool, steps: int, batch: int, seq: int) -> dict:
    """One training case in this process; returns its figures."""
    import numpy as np

    from zoo import registry
    from zoo.recipe.fine_tuning import LoraConfig

    family = registry.get_family(preset)
    config = family.config.model_validate(registry.expand(preset, {}))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, (batch, seq + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    settings = LoraConfig(rank=RANK, alpha=2 * RANK)
    if framework == "lightning":
        step, trainable, model = _torch_step(family, config, settings if lora else None, x, y)
    else:
        step, trainable, model = _keras_step(family, config, settings if lora else None, x, y)
    before = rss_mib()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = None
    if lora:
        from zoo.lora import save_adapter

        with tempfile.TemporaryDirectory() as folder:
            size = save_adapter(model, Path(folder) / "adapter.safetensors", {"seed": 0}).stat().st_size
    return {
        "trainable": trainable,
        "step_s": float(np.median(times[1:] if len(times) > 1 else times)),
        "added_mib": peak - before,
        "peak_mib": peak,
        "adapter_bytes": size,
    }


def _torch_step(family, config, lora, x, y):
    import torch
    import torch.nn.functional as F

    from zoo.initial_weights import seeded_torch_model

    model = seeded_torch_model(family, config, 0).train()
    if lora is not None:
        from zoo.lora import attach

        attach(model, family, config, lora, 0)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)).backward()
        optimizer.step()

    return step, sum(p.numel() for p in params), model


def _keras_step(family, config, lora, x, y):
    import keras

    from zoo.initial_weights import initial_tensors
    from zoo.nn.keras.precision import build_keras

    model = build_keras(family, config, "32-true", initial_tensors(family, config, 0))
    if lora is not None:
        from zoo.lora import attach

        attach(model, family, config, lora, 0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=loss)
    trainable = sum(math.prod(v.shape) for v in model.trainable_variables)

    def step():
        model.train_on_batch(x, y)

    return step, trainable, model


def table(rows: list[dict], args) -> str:
    lines = [
        f"{args.steps} AdamW steps of batch {args.batch} x {args.seq} tokens, float32, CPU "
        f"({os.cpu_count()} cores); LoRA rank {RANK} on q, k, v and the output projection. "
        "Memory: peak resident growth from the first step on (what training adds), then the "
        "process's peak.",
        "",
        "| model | framework | mode | trainable params | step (s) | added memory (MiB) | peak RSS (MiB) "
        "| adapter file |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        size = f"{r['adapter_bytes'] / 2**20:.2f} MiB" if r["adapter_bytes"] else "-"
        lines.append(
            f"| {r['model']} | {r['framework']} | {r['mode']} | {r['trainable']:,} | {r['step_s']:.2f} | "
            f"{r['added_mib']:,.0f} | {r['peak_mib']:,.0f} | {size} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--write", action="store_true", help="Put the table in bench/RESULTS.md.")
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)  # preset framework mode: one child
    args = parser.parse_args()
    if args.case:
        preset, framework, mode = args.case
        print(json.dumps(case(preset, framework, mode == "lora", args.steps, args.batch, args.seq)))
        return
    rows = []
    for name in args.models:
        for framework in ("lightning", "keras"):
            for mode in ("full", "lora"):
                sizes = ["--steps", str(args.steps), "--batch", str(args.batch), "--seq", str(args.seq)]
                command = [sys.executable, __file__, "--case", MODELS[name], framework, mode, *sizes]
                done = subprocess.run(command, capture_output=True, text=True, check=False)
                if done.returncode:
                    raise SystemExit(f"{name} {framework} {mode} failed:\n{done.stderr[-3000:]}")
                row = {
                    "model": name,
                    "framework": framework,
                    "mode": mode,
                    **json.loads(done.stdout.splitlines()[-1]),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    text = table(rows, args)
    print(text)
    if args.write:
        from results_section import write_section

        write_section("## LoRA against full fine-tuning (`bench/lora.py`)", text)


if __name__ == "__main__":
    main()
