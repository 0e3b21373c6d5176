"""Does ``trainer.compile: true`` pay on CPU? (issue 18, item 2)

``compile: true`` means ``torch.compile`` (inductor) of the module in Lightning and
``jit_compile=True`` (XLA) of the train step in Keras. For each small preset this times one
training step (forward, loss, backward, SGD update) without and with it, on the same model,
the same batch and the same start, and reports the speed-up (step time without / with) and
the compile time (the first compiled step's wall time less a steady step). Keras' baseline
is its default: a ``tf.function`` graph without XLA.

Correctness: the compiled model's eval-mode outputs and its losses over the timed steps must
equal the uncompiled model's within a relative tolerance (max |diff| / max |reference|);
dropout is off so that both runs compute the same function.

One fresh process per framework and preset (a compile is timed cold: inductor's on-disk
cache is switched off), one kernel thread, and inside it rounds of uncompiled and compiled
steps interleaved; each step time is the fastest round's mean.

    .venv/bin/python bench/compile.py [--presets convnet-small,gpt2-micro] [--frameworks lightning,keras]
        [--rounds 5] [--steps 10] [--batch-size 32] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from results_section import write_section  # noqa: E402  (bench/ is the script's folder)

SECTION = "## `compile: true` on CPU (`bench/compile.py`)"
PRESETS = "convnet-small,resnet-micro,vit-micro,transformer-small,lstm-small,gpt2-micro,bert-micro,resnet18"
SMALL_IMAGE = 32  # the ImageNet presets at 32x32: a CPU step at 224 takes seconds
TOLERANCE = 1e-4
# Presets whose default task has no loss to train: the task the benchmark trains instead.
TRAINED_TASK = {"bert-micro": {"task": "classification", "num_classes": 2}}


def bench_config(name: str):
    """The preset with dropout off (both runs compute one function), at 32x32 where its image
    is ImageNet-sized, and a trainable task."""
    from zoo import registry

    config = registry.resolve_config(name)
    fields = {k: 0.0 for k in type(config).model_fields if "dropout" in k}
    if "image_size" in type(config).model_fields and config.image_size > SMALL_IMAGE:
        fields["image_size"] = SMALL_IMAGE
    return registry.resolve_config(name, **{**fields, **TRAINED_TASK.get(name, {})})


def batch(config, size: int):
    """Inputs in the canonical layout and integer targets: next tokens for a language model,
    classes otherwise."""
    import numpy as np

    x = config.example_input(size, seed=0)
    rng = np.random.default_rng(1)
    if config.language_model:
        return x, np.roll(x, -1, axis=1)
    return x, rng.integers(0, config.num_classes, size=(size,), dtype=np.int64)


def relative_error(got, want) -> float:
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def interleaved(steps: int, rounds: int, plain, compiled) -> tuple[float, float, list, list]:
    """Fastest round's mean step time of each, rounds alternating; the losses of every step."""
    times: dict[str, list[float]] = {"plain": [], "compiled": []}
    losses: dict[str, list[float]] = {"plain": [], "compiled": []}
    for _ in range(rounds):
        for kind, step in (("plain", plain), ("compiled", compiled)):
            started = time.perf_counter()
            losses[kind] += [step() for _ in range(steps)]
            times[kind].append((time.perf_counter() - started) / steps)
    return min(times["plain"]), min(times["compiled"]), losses["plain"], losses["compiled"]


def measure_torch(name: str, size: int, steps: int, rounds: int) -> dict:
    import copy

    import torch

    from zoo import registry

    torch.set_num_threads(1)
    config = bench_config(name)
    torch.manual_seed(0)
    plain = registry.get_family(name).build_torch(config)
    twin = copy.deepcopy(plain)
    compiled = torch.compile(twin)  # what zoo's Lightning task does with compile: true
    x, y = (torch.from_numpy(a) for a in batch(config, size))

    def stepper(model, parameters):
        optimizer = torch.optim.SGD(parameters, lr=0.01)

        def step() -> float:
            optimizer.zero_grad(set_to_none=True)
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            loss.backward()
            optimizer.step()
            return loss.item()

        return step

    plain.eval(), compiled.eval()
    with torch.no_grad():
        want = plain(x).numpy()
        started = time.perf_counter()
        got = compiled(x).numpy()
        eval_compile_s = time.perf_counter() - started
    forward_error = relative_error(got, want)
    plain.train(), compiled.train()
    plain_step, compiled_step = stepper(plain, plain.parameters()), stepper(compiled, twin.parameters())
    plain_step()
    started = time.perf_counter()
    compiled_step()  # the training graph (forward and backward) compiles here
    first_s = time.perf_counter() - started
    # The first steps above moved both models once: the timed losses continue from one state.
    timed = interleaved(steps, rounds, plain_step, compiled_step)
    return row("lightning", name, timed, first_s + eval_compile_s, forward_error)


def measure_keras(name: str, size: int, steps: int, rounds: int) -> dict:
    import keras
    import tensorflow as tf

    from zoo import registry
    from zoo.keras.data import keras_layout
    from zoo.keras.steps import compile_for

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    config = bench_config(name)
    family = registry.get_family(name)
    keras.utils.set_random_seed(0)
    plain, twin = family.build_keras(config), family.build_keras(config)
    twin.set_weights(plain.get_weights())
    x, y = batch(config, size)
    x = keras_layout(x, family.input_kind)
    task = "language_modeling" if config.language_model else "classification"
    compile_for(plain, task, keras.optimizers.SGD(0.01), jit_compile=False)
    compile_for(twin, task, keras.optimizers.SGD(0.01), jit_compile=True)

    want = plain.predict_on_batch(x)
    started = time.perf_counter()
    got = twin.predict_on_batch(x)  # XLA compiles the predict function here
    eval_compile_s = time.perf_counter() - started
    forward_error = relative_error(got, want)

    def stepper(model):
        return lambda: float(model.train_on_batch(x, y, return_dict=True)["loss"])

    plain_step, compiled_step = stepper(plain), stepper(twin)
    plain_step()  # the graph without XLA is traced here: the baseline's own one-off cost
    started = time.perf_counter()
    compiled_step()  # the train step is traced and XLA-compiled here
    first_s = time.perf_counter() - started
    timed = interleaved(steps, rounds, plain_step, compiled_step)
    return row("keras", name, timed, first_s + eval_compile_s, forward_error)


def run_one(framework: str, name: str, args: argparse.Namespace) -> dict:
    """One fresh process: nothing compiled or cached by an earlier preset."""
    command = [sys.executable, __file__, "--one", framework, "--presets", name]
    command += [
        "--batch-size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
        "--rounds",
        str(args.rounds),
    ]
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"compile bench {framework} {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def verdict(entry: dict) -> str:
    if max(entry["forward_error"], entry["loss_error"]) > TOLERANCE:
        return "**outputs differ**"
    speedup = entry["plain_s"] / entry["compiled_s"]
    if speedup < 1.05:
        return "does not pay"
    steps_to_break_even = entry["compile_s"] / (entry["plain_s"] - entry["compiled_s"])
    return f"pays after {steps_to_break_even:,.0f} steps"


def table(results: list[dict], args: argparse.Namespace, load: tuple[float, float]) -> str:
    lines = [
        "| preset | framework | step ms | compiled step ms | speed-up | compile s "
        "| forward rel. err | loss rel. err | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in results:
        lines.append(
            f"| {e['preset']} | {e['framework']} | {e['plain_s'] * 1e3:.2f} | {e['compiled_s'] * 1e3:.2f} "
            f"| {e['plain_s'] / e['compiled_s']:.2f} | {e['compile_s']:.1f} | {e['forward_error']:.1e} "
            f"| {e['loss_error']:.1e} | {verdict(e)} |"
        )
    lines.append(
        f"\nbatch {args.batch_size}, one training step (forward, loss, backward, SGD), fastest of "
        f"{args.rounds} interleaved rounds of {args.steps} steps, one kernel thread, one fresh process "
        f"per framework and preset; relative error = max |diff| / max |reference|, tolerance {TOLERANCE:g}; "
        f"machine load average {load[0]:.1f} at the start, {load[1]:.1f} at the end (other work on "
        f"{os.cpu_count()} cores: times are upper bounds, compile times most of all)"
    )
    return "\n".join(lines)


def row(framework: str, name: str, timed, first_steps_s: float, forward_error: float) -> dict:
    """One table row from ``interleaved``'s (plain s, compiled s, plain losses, compiled losses):
    compile time is what the first compiled step(s) took beyond a compiled step's own time."""
    plain_s, compiled_s, plain_losses, compiled_losses = timed
    return {
        "framework": framework,
        "preset": name,
        "plain_s": plain_s,
        "compiled_s": compiled_s,
        "compile_s": first_steps_s - compiled_s,
        "forward_error": forward_error,
        "loss_error": relative_error(compiled_losses, plain_losses),
    }


def write_results(text: str) -> None:
    write_section(SECTION, text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", default=PRESETS)
    parser.add_argument("--frameworks", default="lightning,keras")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write-results", action="store_true", help="rewrite this section of RESULTS.md")
    parser.add_argument(
        "--from-lines", type=Path, help="make the table from a run's printed JSON lines instead of measuring"
    )
    parser.add_argument("--load", help="with --from-lines: the run's load averages at start and end, 'A,B'")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        measure = {"lightning": measure_torch, "keras": measure_keras}[args.one]
        print(json.dumps(measure(args.presets, args.batch_size, args.steps, args.rounds)))
        return
    if args.from_lines:
        lines = args.from_lines.read_text().splitlines()
        results = [json.loads(line) for line in lines if line.startswith("{")]
        start, end = (float(value) for value in args.load.split(","))
        text = table(results, args, (start, end))
    else:
        results, load_at_start = [], os.getloadavg()[0]
        for name in args.presets.split(","):
            for framework in args.frameworks.split(","):
                results.append(run_one(framework, name, args))
                print(json.dumps(results[-1]), flush=True)
        text = table(results, args, (load_at_start, os.getloadavg()[0]))
    print(text)
    if args.write_results:
        write_results(text)


if __name__ == "__main__":
    main()
