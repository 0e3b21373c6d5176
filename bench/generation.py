"""Greedy generation in tokens per second: the Keras twin compiled, the Keras twin's eager decode
(what ``zoo sample`` ran before issue 41) and the torch twin, on one ~5M-parameter Llama; and
the Keras twin with ``jit_compile=True``, its greedy loop XLA-compiled (Keras' "auto" leaves XLA
off on a CPU).

The same weights in all four (the torch twin seeded, the Keras twin loaded from it), a batch
of ``--batch`` prompts of ``--prompt`` tokens, the last two left-padded by a few tokens, and
``--new`` generated tokens through ``zoo.sample.generate``: the Keras twin compiled runs its
traced greedy loop (prefill and every step in one call), the others prefill then one token a step.
Every contender must produce the same tokens. One thread for each framework, contenders
interleaved in rounds after one warm-up generation each (the traces of the compiled step are
made there and reported apart); each figure is the fastest round. Tokens per second counts
generated tokens of the whole batch (batch x new / seconds); the ratios are against the eager
Keras decode and against the torch twin.

    .venv/bin/python bench/generation.py [--rounds 3] [--batch 4] [--prompt 16] [--new 64]
        [--write-results]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from results_section import publish

SECTION = "## Greedy generation, Keras compiled (`bench/generation.py`)"
# ~5M parameters: issue 41's Llama (4 layers, width 256, 8 query / 4 key-value heads).
LLAMA_5M = {
    "vocab_size": 8192,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 256,
}


def one_thread() -> None:
    import tensorflow as tf
    import torch

    torch.set_num_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def twins():
    import torch

    from zoo import registry
    from zoo.checkpoint.tensors import load_tensors, model_tensors

    config = registry.resolve_config("llama-micro", **LLAMA_5M)
    family = registry.get_family("llama-micro")
    torch.manual_seed(0)
    torch_model = family.build_torch(config).eval()
    keras_model = family.build_keras(config)
    load_tensors(keras_model, model_tensors(torch_model))
    parameters = sum(p.numel() for p in torch_model.parameters())
    return config, torch_model, keras_model, parameters


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    import numpy as np

    one_thread()
    from zoo.sample import Sampling, generate

    config, torch_model, keras_model, parameters = twins()
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, config.vocab_size, size=(args.batch, args.prompt))
    padding = np.zeros(prompts.shape, bool)
    for row in range(max(0, args.batch - 2), args.batch):
        padding[row, : 2 + 3 * (row % 2)] = True

    def run(model, compiled: bool = True, xla: bool = False):
        def go():
            keras_model.compiled_generation, keras_model.jit_compile = compiled, xla
            try:
                return generate(model, prompts, args.new, Sampling(), padding_mask=padding)
            finally:
                keras_model.compiled_generation, keras_model.jit_compile = True, False

        return go

    contenders = {
        "Keras twin, compiled": run(keras_model),
        "Keras twin, compiled, jit_compile=True (XLA)": run(keras_model, xla=True),
        "Keras twin, eager decode": run(keras_model, compiled=False),
        "torch twin": run(torch_model),
    }
    tokens, best, first = {}, {name: float("inf") for name in contenders}, {}
    for name, go in contenders.items():  # warm-up: the compiled twin's traces happen here
        started = time.perf_counter()
        tokens[name] = go()
        first[name] = time.perf_counter() - started
    reference = tokens["torch twin"]
    for name, got in tokens.items():
        if got.tolist() != reference.tolist():
            print(f"{name} generated other tokens than the torch twin", file=sys.stderr)
            return 1
    for _ in range(args.rounds):
        for name, go in contenders.items():
            started = time.perf_counter()
            go()
            best[name] = min(best[name], time.perf_counter() - started)
    traces = keras_model.compiled_generation_functions().traces
    rate = {name: args.batch * args.new / seconds for name, seconds in best.items()}
    eager, torch_rate = rate["Keras twin, eager decode"], rate["torch twin"]
    lines = [
        f"Llama of {parameters / 1e6:.1f}M parameters ({LLAMA_5M['num_hidden_layers']} layers, width "
        f"{LLAMA_5M['hidden_size']}), {args.batch} prompts of {args.prompt} tokens (two left-padded) + "
        f"{args.new} greedy tokens, one thread, fastest of {args.rounds} interleaved rounds; the same "
        "tokens from all four.",
        "",
        "| contender | tokens/s | x eager Keras | x torch twin | first call (s) |",
        "|---|---|---|---|---|",
    ]
    for name in contenders:
        lines.append(
            f"| {name} | {rate[name]:.1f} | {rate[name] / eager:.2f} | {rate[name] / torch_rate:.2f} "
            f"| {first[name]:.2f} |"
        )
    lines += [
        "",
        f"Ratio, Keras compiled / Keras eager: **{rate['Keras twin, compiled'] / eager:.1f}x**; "
        f"Keras compiled / torch twin: **{rate['Keras twin, compiled'] / torch_rate:.2f}**. "
        f"Traces of the compiled functions over the whole run: greedy loop {traces['greedy']}, XLA "
        f"greedy loop {traces['greedy_xla']}, "
        f"prefill {traces['prefill']}, decode step {traces['step']}.",
    ]
    text = "\n".join(lines)
    return publish(SECTION, text, args.write_results)


if __name__ == "__main__":
    sys.exit(main())
