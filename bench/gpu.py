"""Training throughput, model FLOPs utilisation and memory on one GPU. Issue 18, item 6.

For each preset (gpt2 at 1024 tokens, resnet50 at 224 x 224; ``--presets``) and each mixed
precision (bf16-mixed, 16-mixed; ``--precisions``), the four ways of bench/real_sizes.py, each
in a fresh process, on the same synthetic data (nothing downloaded), AdamW at a constant rate:

  raw-torch      the torch twin in a hand-written loop: ``torch.autocast`` around the forward
                 pass, ``torch.amp.GradScaler`` under 16-mixed, each batch copied to the GPU
  zoo-lightning  ``zoo.train(recipe, "lightning")``, the recipe's ``trainer.precision``
  plain-keras    the Keras twin under the precision's dtype policy (zoo's: the product layers
                 mixed, docs/precision.md), ``LossScaleOptimizer(AdamW)`` under 16-mixed,
                 ``compile`` + ``fit``, TensorFlow memory growth on
  zoo-keras      ``zoo.train(recipe, "keras")`` (zoo turns memory growth on)

Printed and written to ``bench/out/gpu.md`` and ``bench/out/gpu.json`` (``--out``):

- samples/s and tokens/s: the fastest epoch after the first (warm-up), real_sizes.py's method;
- MFU: model FLOPs per sample x samples/s over the GPU's dense bf16 peak (:data:`PEAK_BF16`,
  by device name; an unknown GPU gets no MFU, and the table says so). A GPT-2 trains
  6 N + 12 L d T FLOPs per token (N parameters, the tied head once; L blocks of width d over
  T tokens of attention: PaLM's appendix B, nanoGPT's ``estimate_mfu``); any other model
  3x the forward FLOPs ``torch.utils.flop_counter.FlopCounterMode`` counts on one sample;
- peak memory of every run (``torch.cuda.max_memory_allocated``; TensorFlow's
  ``get_memory_info('GPU:0')['peak']``), and of zoo's two ways again with
  ``trainer.gradient_checkpointing: true`` at the first precision;
- the largest batch of gpt2-medium (1024 tokens, first precision, two AdamW steps) that fits,
  per framework, with and without gradient checkpointing: doubling from 1, then bisection,
  every probe in a fresh process so that an out-of-memory error leaves nothing behind.

    .venv/bin/python bench/gpu.py [--presets gpt2,resnet50] [--precisions bf16-mixed,16-mixed]
                                  [--steps 10] [--epochs 3] [--probe-frameworks lightning,keras]
                                  [--probe-preset gpt2-medium] [--probe-cap 1024] [--compile]
                                  [--write-results]

Every way runs eagerly unless ``--compile`` (``torch.compile`` in both torch ways, zoo's
through ``trainer.compile``; ``jit_compile`` in both Keras ways): plain Keras is compiled with
``jit_compile=False`` to match zoo's recipe, where Keras' own default ("auto") would take XLA
on a GPU. The MFU target (>= 40 % for Lightning on gpt2) is for ``--compile``.

Without CUDA it says so and stops; ``--cpu-smoke`` runs the same code end to end on the CPU at
tiny sizes (gpt2-micro, resnet-micro, a couple of steps, bf16-mixed, batch probes capped at 4):
its figures are not GPU figures. ``--write-results`` rewrites this script's section of
bench/RESULTS.md: measured tables on a GPU, "no GPU lent" and what would be measured otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import real_sizes as rs  # bench/ is sys.path[0] when a bench script runs

ROOT = rs.ROOT
HEADING = "## GPU throughput, MFU and memory (`bench/gpu.py`)"
SMOKE_NOTE = "no GPU: CPU smoke run, figures are not GPU figures"
NO_GPU = (
    "no GPU here (torch.cuda.is_available() is False): bench/gpu.py measures a GPU; "
    "`bench/gpu.py --cpu-smoke` runs it end to end on the CPU at tiny sizes"
)

# Dense bf16 tensor-core peaks (FLOP/s, no sparsity) from the vendor's data sheets; the
# first name contained in the device's name wins. fp16's dense peak is the same on these.
PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM (torch names it "NVIDIA H100 80GB HBM3")
    ("H200", 989e12),
    ("A100", 312e12),
)

# Sizes per preset: the on a GPU, tiny ones for --cpu-smoke.
SIZES: dict[str, dict] = {
    "gpt2": {"kind": "language_modeling", "seq": 1024, "batch": 16, "vocab": 50257},
    "resnet50": {"kind": "image", "size": 224, "batch": 128, "classes": 1000},
    "gpt2-micro": {"kind": "language_modeling", "seq": 32, "batch": 4, "vocab": 64},
    "resnet-micro": {"kind": "image", "size": 16, "batch": 4, "classes": 10},
}
GPU_PRESETS, SMOKE_PRESETS = ("gpt2", "resnet50"), ("gpt2-micro", "resnet-micro")
# The largest-batch search: the gpt2-medium at 1024 tokens, a micro one for --cpu-smoke.
PROBES = {"gpt2-medium": {"seq": 1024, "vocab": 50257}, "gpt2-micro": {"seq": 32, "vocab": 64}}
PROBE, SMOKE_PROBE = ("gpt2-medium", 1024), ("gpt2-micro", 4)  # (preset, cap)
WAYS = rs.WAYS
ZOO_WAYS = ("zoo-lightning", "zoo-keras")
TARGET_RATIO, TARGET_MFU = 0.95, 0.40


# --------------------------------------------------------------------------- arithmetic


def peak_flops(device_name: str | None) -> float | None:
    """The dense bf16 peak of a GPU by its name; None for a GPU not in :data:`PEAK_BF16`."""
    for key, peak in PEAK_BF16:
        if device_name and key.lower() in device_name.lower():
            return peak
    return None


def transformer_flops_per_token(parameters: int, n_layer: int, n_embd: int, seq: int) -> float:
    """Training FLOPs per token: 6 per parameter (forward 2, backward 4) plus attention's
    scores and weighted sum, 12 L d T (PaLM, appendix B)."""
    return 6.0 * parameters + 12.0 * n_layer * n_embd * seq


def mfu(samples_per_s: float, flops_per_sample: float, peak: float | None) -> float | None:
    return None if not peak else samples_per_s * flops_per_sample / peak


def largest_batch(fits: Callable[[int], bool], cap: int) -> tuple[int, bool, list[tuple[int, bool]]]:
    """The largest batch ``fits`` accepts, at most ``cap``: doubling from 1 to the first
    failure, then bisection between the last success and it. Returns the batch (0: not even
    1 fits), whether the cap stopped the search, and every probe in order."""
    probes: list[tuple[int, bool]] = []

    def probe(batch: int) -> bool:
        probes.append((batch, fits(batch)))
        return probes[-1][1]

    good, bad, batch = 0, None, 1
    while batch <= cap:
        if not probe(batch):
            bad = batch
            break
        good, batch = batch, batch * 2
    if bad is None:
        if good < cap and probe(cap):  # the cap itself, when it is not a power of two
            good = cap
        return good, True, probes
    while bad - good > 1:
        middle = (good + bad) // 2
        if probe(middle):
            good = middle
        else:
            bad = middle
    return good, False, probes


def counted_forward_flops(model, example) -> int:
    """FLOPs of one forward pass as ``FlopCounterMode`` counts them (2 per multiply-add)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(example)
    return counter.get_total_flops()


def flops_per_sample(preset: str, config, example) -> dict:
    """Training FLOPs of one sample of ``config`` (``example``: one input, the torch twin's
    layout) and how they were counted."""
    import torch

    import zoo

    model = zoo.create_model(preset, framework="lightning", **config.model_dump()).eval()
    parameters = sum(p.numel() for p in model.parameters())  # shared (tied) tensors once
    fields = config.model_dump()
    if {"n_layer", "n_embd"} <= fields.keys() and fields.get(
        "task", "language_modeling"
    ) == "language_modeling":
        seq = example.shape[-1]
        per_token = transformer_flops_per_token(parameters, fields["n_layer"], fields["n_embd"], seq)
        how = f"6 N + 12 L d T per token, N = {parameters:,}, x {seq} tokens"
        return {"flops": per_token * seq, "how": how, "parameters": parameters}
    forward = counted_forward_flops(model, torch.from_numpy(example))
    return {
        "flops": 3.0 * forward,
        "how": f"3 x {forward:,} forward (FlopCounterMode)",
        "parameters": parameters,
    }


# ------------------------------------------------------------------- fresh processes


def peak_memory(way: str, gpu: bool) -> tuple[int | None, str]:
    """The process's peak memory for a way's framework, and where the figure comes from.

    On the CPU every way reports the process's peak resident set: TensorFlow's CPU allocator
    keeps statistics only in some builds and leaves oneDNN's small-allocation pool out, so it
    can read 0 for a whole training run (seen on a busy CI machine), and one measure for all
    four ways keeps the CPU smoke rows comparable."""
    if gpu and way in ("raw-torch", "zoo-lightning"):
        import torch

        return torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated"
    if gpu and way in ("plain-keras", "zoo-keras"):
        import tensorflow as tf

        return tf.config.experimental.get_memory_info("GPU:0")["peak"], "tf get_memory_info('GPU:0')"
    return peak_rss(), "ru_maxrss (process peak resident set)"


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def measure(
    way: str, preset: str, data: Path, epochs: int, precision: str, checkpointing: bool, compile: bool
) -> dict:
    """Runs in a fresh process: one way of training, epoch times and peak memory."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import torch

    import zoo
    from zoo import registry
    from zoo.data import load_dataset

    gpu = torch.cuda.is_available()
    spec = SIZES[preset]
    trainer = {
        "accelerator": "gpu" if gpu else "cpu", "precision": precision,
        "gradient_checkpointing": checkpointing, "num_threads": None if gpu else 1, "compile": compile,
    }  # fmt: skip
    export = Path(tempfile.mkdtemp(prefix="zoo-gpu-bench-"))
    try:
        recipe = zoo.load_recipe(rs.recipe_for(preset, data, epochs, export, spec=spec, trainer=trainer))
        family = registry.get_family(recipe.model.architecture)
        dataset = load_dataset(recipe.data, family.input_kind)
        config = recipe.model.bind(dataset.info)
        if way == "flops":
            return flops_per_sample(preset, config, dataset.train.x[:1])
        common = {"batch": spec["batch"], "precision": precision, "checkpointing": checkpointing}
        common["threads"] = trainer["num_threads"]
        if way.startswith("zoo-"):
            result = zoo.train(recipe, way.removeprefix("zoo-"))
            times = [float(r["epoch_seconds"]) for r in result.history]
        elif way == "raw-torch":
            device = "cuda" if gpu else "cpu"
            times = rs.raw_torch(
                preset, family, config, dataset, epochs, device=device, compile=compile, **common
            )
        else:
            times = rs.plain_keras(preset, family, config, dataset, epochs, jit_compile=compile, **common)
    finally:
        shutil.rmtree(export, ignore_errors=True)
    peak, source = peak_memory(way, gpu)
    return {"times": times, "samples": len(dataset.train), "peak_bytes": peak, "memory_source": source}


OUT_OF_MEMORY = re.compile(
    r"out of memory|outofmemory|resourceexhausted|\boom\b|alloc_failed|failed to allocate|"
    r"dst tensor is not initialized",  # the last: TensorFlow's copy to a full GPU
    re.IGNORECASE,
)


def out_of_memory(error: BaseException) -> bool:
    return bool(OUT_OF_MEMORY.search(f"{type(error).__name__} {error}"))


def probe_batch(
    framework: str, preset: str, batch: int, precision: str, checkpointing: bool, compile: bool
) -> dict:
    """Runs in a fresh process: two AdamW steps of the probe's GPT-2 at ``batch``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import torch

    from zoo import registry

    gpu = torch.cuda.is_available()
    spec = PROBES[preset]
    family = registry.get_family(preset)
    config = registry.resolve_config(preset, vocab_size=spec["vocab"])
    ids = np.random.default_rng(rs.SEED).integers(0, spec["vocab"], (2 * batch, spec["seq"] + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    try:
        if framework == "lightning":
            peak = probe_torch(family, config, x, y, batch, precision, checkpointing, compile, gpu)
        else:
            peak = probe_keras(family, config, x, y, batch, precision, checkpointing, compile, gpu)
    except Exception as error:  # only running out of memory is an answer
        if not out_of_memory(error):
            raise
        return {"fits": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    return {"fits": True, "peak_bytes": peak}


def probe_torch(family, config, x, y, batch, precision, checkpointing, compile, gpu) -> int:
    import torch
    import torch.nn.functional as F

    device = "cuda" if gpu else "cpu"
    import zoo

    model = zoo.create_model(config.preset, **config.model_dump()).to(device).train()
    family.set_grad_checkpointing(model, "lightning", checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=rs.LR, weight_decay=rs.WEIGHT_DECAY)
    if compile:
        model = torch.compile(model)
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "16-mixed")
    for step in range(2):
        inputs = torch.from_numpy(x[step * batch : (step + 1) * batch]).to(device)
        labels = torch.from_numpy(y[step * batch : (step + 1) * batch]).to(device)
        with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    if gpu:
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return peak_rss()


def probe_keras(family, config, x, y, batch, precision, checkpointing, compile, gpu) -> int:
    import keras
    import tensorflow as tf

    from zoo.nn.keras.precision import build_keras

    for device in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(device, True)
    model = build_keras(family, config, precision)
    family.set_grad_checkpointing(model, "keras", checkpointing)
    optimizer = keras.optimizers.AdamW(rs.LR, weight_decay=rs.WEIGHT_DECAY, epsilon=1e-8)
    if precision == "16-mixed":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=compile)  # Keras' "auto" is XLA on a GPU
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    peak, _ = peak_memory("plain-keras", gpu)
    return peak


def child(command: list[str], timeout: float) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, __file__, *command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env=env,
    )
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[:2])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def device_name() -> str | None:
    """The GPU's name, asked in a fresh process so that this one never holds a CUDA context
    (the batch probes want the whole GPU)."""
    code = "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None


# ---------------------------------------------------------------------------- report


def size(value: float | None) -> str:
    return (
        "-" if value is None else f"{value / 2**30:.2f} GiB" if value >= 2**28 else f"{value / 2**20:.1f} MiB"
    )


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def number(value: float | None, digits: str = ".3g") -> str:
    return "-" if value is None else format(value, digits)


def report(results: dict) -> str:
    gpu, peak = results["gpu"], results["peak_flops"]
    if results["smoke"]:
        device = f"**{results['note']}**"
    elif peak:
        device = f"{gpu}, dense bf16 peak {peak / 1e12:.0f} TFLOP/s"
    else:
        device = f"{gpu}: not in the peak table (bench/gpu.py, PEAK_BF16), so no MFU"
    lines = [
        device,
        "",
        "| preset | precision | way | batch | samples/s | tokens/s | MFU | peak memory |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        if run["checkpointing"]:
            continue
        speed = "failed" if "error" in run else number(run.get("samples_per_s"))
        cells = [run["preset"], run["precision"], run["way"], run["batch"], speed]
        cells += [
            number(run.get("tokens_per_s"), ",.0f"),
            number(run.get("mfu"), ".1%"),
            size(run.get("peak_bytes")),
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "| preset | precision | zoo lightning / raw torch | zoo keras / plain keras |",
        "|---|---|---|---|",
    ]
    for row in results["ratios"]:
        cells = [
            row["preset"],
            row["precision"],
            number(row["lightning"], ".2f"),
            number(row["keras"], ".2f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| preset | framework | precision | peak memory | with gradient checkpointing | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["memory"]:
        cells = [row["preset"], row["framework"], row["precision"], size(row["plain_bytes"])]
        cells += [
            size(row["checkpointed_bytes"]),
            number(ratio(row["checkpointed_bytes"], row["plain_bytes"]), ".2f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| model | framework | gradient checkpointing | largest batch | probes |",
        "|---|---|---|---|---|",
    ]
    for row in results["largest_batch"]:
        batch = (
            "failed"
            if "error" in row
            else f"{row['batch']}" + (f" (the cap, {row['cap']})" if row["capped"] else "")
        )
        probes = ", ".join(f"{b}{'' if ok else ' x'}" for b, ok in row.get("probes", []))
        cells = [
            f"{row['preset']} (seq {row['seq']})",
            row["framework"],
            "yes" if row["checkpointing"] else "no",
        ]
        lines.append("| " + " | ".join([*cells, batch, probes]) + " |")
    mode = "compiled (torch.compile, XLA)" if results["compile"] else "eager (no torch.compile, no XLA)"
    flops = "; ".join(
        f"{p}: {f['flops']:.3g} FLOPs per sample ({f['how']})" for p, f in results["flops"].items()
    )
    lines += [
        "",
        f"samples/s: the fastest of epochs 2-{results['epochs']} ({results['steps']} steps each), one fresh "
        f"process per run; {mode}; "
        f"MFU against the dense bf16 peak; {flops}. Targets: zoo / hand-written "
        f">= {TARGET_RATIO}, Lightning MFU >= {TARGET_MFU:.0%} (gpt2). {results['minutes']:.0f} min.",
    ]
    sources = sorted({r["memory_source"] for r in results["runs"] if r.get("memory_source")})
    lines.append(f"\npeak memory: {'; '.join(sources) or '-'}")
    if results["smoke"]:
        lines.append(f"\n{results['note']}")
    return "\n".join(lines)


NO_GPU_SECTION = f"""no GPU lent: nothing measured yet. On a machine with CUDA, run

```bash
.venv/bin/python bench/gpu.py --write-results   # gpt2 and resnet50, bf16-mixed and 16-mixed
```

Each run a fresh process on synthetic data (nothing downloaded), AdamW at a constant rate:

- samples/s and tokens/s of gpt2 (batch {SIZES["gpt2"]["batch"]} x {SIZES["gpt2"]["seq"]} tokens) and \
resnet50 (batch {SIZES["resnet50"]["batch"]} x 224 x 224) in
  bf16-mixed and 16-mixed, trained four ways: a hand-written torch loop (`torch.autocast`,
  `torch.amp.GradScaler` under 16-mixed), zoo Lightning, plain Keras `compile` + `fit` (the
  twin's mixed dtype policy, `LossScaleOptimizer` under 16-mixed), zoo Keras;
- model FLOPs utilisation against the GPU's dense bf16 peak (H100 SXM and H200 989, A100 312
  TFLOP/s; another GPU gets no MFU): gpt2 at 6 N + 12 L d T FLOPs per token, resnet50 at 3x
  the forward FLOPs `FlopCounterMode` counts. Targets: >= 40 % for Lightning on gpt2, and zoo
  / hand-written >= 0.95 in both frameworks;
- peak memory (`torch.cuda.max_memory_allocated`; TensorFlow's
  `get_memory_info('GPU:0')['peak']`, memory growth on) with and without
  `trainer.gradient_checkpointing`;
- the largest batch of gpt2-medium at 1024 tokens that fits, per framework, with and without
  gradient checkpointing (doubling, then bisection, each probe a fresh process).

Every way eager by default; `--compile` compiles all four (`torch.compile`, Keras XLA), which
the >= 40 % MFU target assumes.

`bench/gpu.py --cpu-smoke` runs the same code on the CPU at tiny sizes (tests/test_bench_gpu.py);
its figures are not GPU figures and are never written here.

Both Keras ways train 16-mixed behind a `LossScaleOptimizer`: zoo's since 217a26c (before,
Keras' `compile` left a twin built under float32 unscaled; docs/precision.md)."""


# ------------------------------------------------------------------------------ main


def run_all(args, smoke: bool, gpu: str | None) -> dict:
    started = time.perf_counter()
    presets = args.presets.split(",") if args.presets else list(SMOKE_PRESETS if smoke else GPU_PRESETS)
    precisions = args.precisions.split(",")
    first = precisions[0]
    results: dict = {
        "gpu": gpu, "peak_flops": None if smoke else peak_flops(gpu), "smoke": smoke,
        "note": (SMOKE_NOTE if gpu is None else f"smoke run on {gpu}: tiny sizes") if smoke else None,
        "compile": args.compile, "steps": args.steps, "epochs": args.epochs,
        "runs": [], "flops": {}, "ratios": [], "memory": [], "largest_batch": [],
    }  # fmt: skip
    timeout = 600 if smoke else 3600

    def way_run(way, preset, data, precision, checkpointing) -> dict:
        spec = SIZES[preset]
        row = {"preset": preset, "precision": precision, "way": way, "checkpointing": checkpointing}
        row["batch"] = spec["batch"]
        command = ["--one", way, "--presets", preset, "--data", str(data), "--epochs", str(args.epochs)]
        command += ["--precisions", precision] + (["--checkpointing"] if checkpointing else [])
        command += ["--compile"] if args.compile else []
        print(f"  {preset} {precision} {way}{' checkpointed' if checkpointing else ''}", file=sys.stderr)
        try:
            measured = child(command, timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            print(error, file=sys.stderr)
            row["error"] = str(error)[-500:]
            results["runs"].append(row)
            return row
        row.update(measured, samples_per_s=rs.samples_per_second(measured))
        if spec["kind"] != "image":
            row["tokens_per_s"] = row["samples_per_s"] * spec["seq"]
        per_sample = results["flops"].get(preset, {}).get("flops")
        row["mfu"] = mfu(row["samples_per_s"], per_sample, results["peak_flops"]) if per_sample else None
        results["runs"].append(row)
        return row

    with tempfile.TemporaryDirectory(prefix="zoo-gpu-bench-data-") as scratch:
        for preset in presets:
            data = rs.write_data(preset, args.steps, Path(scratch) / preset, spec=SIZES[preset])
            flops_command = ["--one", "flops", "--presets", preset, "--data", str(data), "--epochs", "2"]
            results["flops"][preset] = child([*flops_command, "--precisions", first], timeout)
            for precision in precisions:
                speed = {way: way_run(way, preset, data, precision, False) for way in WAYS}
                get = {w: r.get("samples_per_s") for w, r in speed.items()}
                results["ratios"].append({
                    "preset": preset, "precision": precision,
                    "lightning": ratio(get["zoo-lightning"], get["raw-torch"]),
                    "keras": ratio(get["zoo-keras"], get["plain-keras"]),
                })  # fmt: skip
                if precision == first:
                    plain = speed
            for way in ZOO_WAYS:
                checkpointed = way_run(way, preset, data, first, True)
                results["memory"].append({
                    "preset": preset, "framework": way.removeprefix("zoo-"), "precision": first,
                    "plain_bytes": plain[way].get("peak_bytes"),
                    "checkpointed_bytes": checkpointed.get("peak_bytes"),
                    "plain_samples_per_s": plain[way].get("samples_per_s"),
                    "checkpointed_samples_per_s": checkpointed.get("samples_per_s"),
                    "memory_source": checkpointed.get("memory_source"),
                })  # fmt: skip
    probe = {"preset": args.probe_preset, **PROBES[args.probe_preset]}
    frameworks = [f for f in args.probe_frameworks.split(",") if f and f != "none"]
    for framework in frameworks:
        for checkpointing in (False, True):
            row = {"preset": probe["preset"], "seq": probe["seq"], "framework": framework}
            row.update(checkpointing=checkpointing, precision=first, cap=args.probe_cap)
            print(
                f"  largest batch: {probe['preset']} {framework} checkpointing={checkpointing}",
                file=sys.stderr,
            )

            def fits(batch: int, framework=framework, checkpointing=checkpointing, row=row) -> bool:
                command = ["--probe", framework, "--presets", probe["preset"], "--batch", str(batch)]
                command += ["--precisions", first] + (["--checkpointing"] if checkpointing else [])
                command += ["--compile"] if args.compile else []
                answer = child(command, timeout)
                print(f"    batch {batch}: {'fits' if answer['fits'] else answer['error']}", file=sys.stderr)
                row.setdefault("peak_bytes", {})[str(batch)] = answer.get("peak_bytes")
                return answer["fits"]

            try:
                row["batch"], row["capped"], row["probes"] = largest_batch(fits, args.probe_cap)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                print(error, file=sys.stderr)
                row["error"] = str(error)[-500:]
            results["largest_batch"].append(row)
    results["minutes"] = (time.perf_counter() - started) / 60
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", help=f"comma-separated (default {','.join(GPU_PRESETS)}; smoke: "
                        f"{','.join(SMOKE_PRESETS)}); any of {', '.join(SIZES)}")  # fmt: skip
    parser.add_argument("--precisions", help="comma-separated; the first also runs the memory and batch "
                        "probes (default bf16-mixed,16-mixed; smoke: bf16-mixed)")  # fmt: skip
    parser.add_argument("--steps", type=int, help="optimizer steps per epoch (default 10; smoke: 2)")
    parser.add_argument("--epochs", type=int, help="per run; the first is warm-up (default 3; smoke: 2)")
    parser.add_argument(
        "--probe-frameworks", default="lightning,keras", help="largest-batch probes; 'none' skips"
    )
    parser.add_argument(
        "--probe-preset",
        choices=list(PROBES),
        help="the largest-batch model (default gpt2-medium; smoke: gpt2-micro)",
    )
    parser.add_argument("--probe-cap", type=int, help="largest batch probed (default 1024; smoke: 4)")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="every way compiled: torch.compile (zoo: trainer.compile), Keras jit_compile (XLA); "
        "without it every way runs eagerly, plain Keras too (its default on a GPU is XLA)",
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU: not GPU figures")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "out", help="gpu.md and gpu.json go here"
    )
    parser.add_argument(
        "--write-results", action="store_true", help="rewrite this section of bench/RESULTS.md"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    smoke = args.cpu_smoke
    args.precisions = args.precisions or ("bf16-mixed" if smoke else "bf16-mixed,16-mixed")
    args.steps = args.steps or (2 if smoke else 10)
    args.epochs = args.epochs or (2 if smoke else 3)
    args.probe_preset = args.probe_preset or (SMOKE_PROBE if smoke else PROBE)[0]
    args.probe_cap = args.probe_cap or (SMOKE_PROBE if smoke else PROBE)[1]
    if args.one:
        answer = measure(
            args.one,
            args.presets,
            Path(args.data),
            args.epochs,
            args.precisions,
            args.checkpointing,
            args.compile,
        )
        print(json.dumps(answer))
        return
    if args.probe:
        print(
            json.dumps(
                probe_batch(
                    args.probe, args.presets, args.batch, args.precisions, args.checkpointing, args.compile
                )
            )
        )
        return
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch is warm-up")
    unknown = [p for p in (args.presets or "").split(",") if p and p not in SIZES]
    if unknown:
        parser.error(f"unknown presets {unknown}; choose from {', '.join(SIZES)}")
    gpu = device_name()
    if gpu is None and args.write_results:
        from results_section import write_section

        write_section(HEADING, NO_GPU_SECTION)
        print(
            f"no GPU here: wrote the 'no GPU lent' section of {HEADING!r} in bench/RESULTS.md",
            file=sys.stderr,
        )
    if gpu is None and not smoke:
        if not args.write_results:
            sys.exit(NO_GPU)
        print(NO_GPU, file=sys.stderr)  # the job is done: the section says no GPU was lent
        return
    if gpu is not None and smoke:
        print("--cpu-smoke runs the tiny sizes on the GPU present here", file=sys.stderr)
    results = run_all(args, smoke, gpu)
    text = report(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.md").write_text(text + "\n")
    (args.out / "gpu.json").write_text(json.dumps(results, indent=1) + "\n")
    if gpu is not None and args.write_results and not smoke:
        from results_section import write_section

        write_section(HEADING, text)


if __name__ == "__main__":
    main()
