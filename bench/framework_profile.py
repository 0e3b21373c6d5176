"""Where does a training step go in each framework? Issue 18, item 3.

bench/real_sizes.py finds torch 1.5-3.8x faster than Keras on the convolution and LSTM presets
and Keras a little faster on the transformers; this says why. For each preset at
real_sizes.py's sizes, one training step (forward, loss, backward, AdamW update; float32, one
kernel thread, synthetic data from a seed) of each twin is profiled by its own framework's
profiler, in a fresh process per framework and preset:

  torch   ``zoo.create_model(..., framework="lightning", seed=0)`` in a hand-written step under
          ``torch.profiler``; each aten op's self CPU time (what ``key_averages()`` sums by name),
          its category read from the op and the events around it (``Optimizer.step``,
          ``MkldnnRnnLayerBackward0``, ``aten::dropout``).
  keras   the Keras twin's ``compile`` + ``train_on_batch`` (a ``tf.function``, no XLA) under
          ``tf.profiler.experimental``; the written ``*.xplane.pb`` is parsed here: every
          "scope/name:OpType" event of the host plane, less the events nested in it (self time),
          its category read from the op type and its name scope (``adam_w/``, ``batch_norm``).

What no op holds (Python, the autograd engine, TensorFlow's executor) is "runtime": profiled
wall time less the ops' sum; coverage = that sum / the wall time. The category with the largest
gap explains the preset's ratio. Micro-measurements then isolate the kernels the profile
points at, in both frameworks at one thread: every distinct convolution shape of the model
(forward, backward-input, backward-filter), its three largest matrix products, and its
attention as zoo spells it out against the fused kernel (``F.scaled_dot_product_attention``,
``keras.ops.dot_product_attention``).

    .venv/bin/python bench/framework_profile.py [--presets resnet18,lstm-medium-lm,gpt2]
                                                [--steps 2] [--write-results] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

# bench/ is the script's folder
from real_sizes import LR, PRESETS, SEED, SPECIAL, WEIGHT_DECAY, input_words
from results_section import write_section

from zoo.progress import bar  # real_sizes put this checkout first on the path

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Framework against framework: where a step goes (`bench/framework_profile.py`)"
# Registry presets at toy sizes, for the smoke test (tests/test_bench_framework_profile.py).
MICRO = {
    "resnet-micro": {"kind": "image", "size": 16, "batch": 4, "classes": 10},
    "gpt2-micro": {"kind": "language_modeling", "seq": 32, "batch": 2, "vocab": 1000},
}
SPECS = {**PRESETS, **MICRO}
IGNORE_INDEX = -100
# (category, op-type pattern, context pattern): the first rule either pattern matches wins.
# torch's op types are aten names, its context the enclosing events; TensorFlow's op types are
# its kernels', its context the op's name scope. Order matters: an optimizer's mul is "optimizer".
RULES = [
    ("optimizer", None, r"optimizer\.(step|zero_grad)|^adam_w/"),
    ("loss", r"sparsesoftmaxcrossentropy|log_softmax|nll_loss",
     r"compile_loss|cross_entropy|logsoftmaxbackward"),
    ("recurrent cell", r"rnn|lstm|gru",
     r"(^|/)(rnn|lstm|gru)(_\d+)*(/|$)|/while|aten::lstm|rnnlayerbackward"),
    ("dropout", r"bernoulli|native_dropout", r"^(?!gradient_tape).*dropout"),
    ("attention softmax", r"softmax|masked_fill", r"attention[^/]*/(selectv2|softmax)|/softmax"),
    ("conv forward", r"^(_mkl(native)?)?(conv2d|_?fusedconv2d)$|^(mkldnn_convolution|_slow_conv2d_forward)$",
     None),  # TensorFlow's oneDNN kernels (TF_ENABLE_ONEDNN_OPTS=1) are _MklNative*
    ("conv backward", r"conv2dbackprop|convolution_backward", None),
    ("normalization", r"norm", r"norm"),
    ("matmul", r"^(_mkl(native)?)?(mm|addmm|bmm|baddbmm|matmul|_?fusedmatmul|batchmatmul\w*|einsum)$", None),
    ("embedding", r"embedding|resourcegather|unsortedsegmentsum|index_select|index_add", r"embedding"),
    ("data movement", r"^(_?copy_?|_to_copy|to|clone|contiguous|empty\w*|zeros\w*|fill_?|zero_|transpose|"
     r"view|reshape|_reshape_alias|_unsafe_view|permute|t|as_strided_?|cat|concatv2|stack|pack|unpack|"
     r"split\w*|chunk|expand|slice|select|stridedslice\w*|detach_?|alias|unsqueeze|squeeze|flatten|"
     r"pad|constant_pad_nd|tile|identity|cast|readvariableop|assign\w*variableop|tensorlist\w*|const|"
     r"lift_fresh|broadcastto|gatherv2|zeroslike|shape)$", None),
    ("elementwise", r"add|mul|sub|div|neg|relu|threshold|gelu|tanh|sigmoid|sqrt|pow|square|exp|log|sum|"
     r"mean|max|min|where|select|pool|clamp|bias|equal|greater|less|logical|lerp|erf", None),
]  # fmt: skip
CATEGORIES = [rule[0] for rule in RULES] + ["other", "runtime"]


def category(op: str, context: str) -> str:
    op, context = op.lower(), context.lower()
    for name, op_pattern, context_pattern in RULES:
        if (op_pattern and re.search(op_pattern, op)) or (
            context_pattern and re.search(context_pattern, context)
        ):
            return name
    return "other"


def model_fields(spec: dict) -> dict:
    """What real_sizes.py's data binds: an image model's size and classes, a language model's vocabulary."""
    if spec["kind"] == "image":
        return {"image_size": spec["size"], "num_classes": spec["classes"]}
    return {"vocab_size": spec["vocab"]}


def batch(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """One batch from the seed in torch's layout: images and classes, or tokens and their targets
    (the next token; for a masked LM, the token at 15 % of positions, ignored elsewhere)."""
    rng = np.random.default_rng(SEED)
    if spec["kind"] == "image":
        x = rng.standard_normal((spec["batch"], 3, spec["size"], spec["size"]), dtype=np.float32)
        return x, rng.integers(0, spec["classes"], spec["batch"])
    ids = rng.integers(len(SPECIAL), spec["vocab"], (spec["batch"], spec["seq"] + 1))
    if spec["kind"] == "language_modeling":
        return ids[:, :-1], ids[:, 1:]
    x = ids[:, :-1]
    return x, np.where(rng.random(x.shape) < 0.15, x, IGNORE_INDEX)


def fastest_ms(call, repeats: int) -> float:
    """The fastest of ``repeats`` calls after one warm-up: other work only ever slows a call down."""
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times) * 1e3


def summary(ops: Counter, wall_ms: float, step_ms: float, steps: int) -> dict:
    """Per-step figures from ``{(op, category): ms over all profiled steps}``."""
    categories = dict.fromkeys(CATEGORIES, 0.0)
    for (_, name), ms in ops.items():
        categories[name] += ms / steps
    in_ops = sum(categories.values())
    categories["runtime"] = max(wall_ms / steps - in_ops, 0.0)
    top = [[op, name, ms / steps] for (op, name), ms in ops.most_common(8)]
    return {"step_ms": step_ms, "profiled_ms": wall_ms / steps, "coverage": in_ops / (wall_ms / steps),
            "categories": categories, "top": top}  # fmt: skip


# ------------------------------------------------------------------------------ torch


def profile_torch(name: str, spec: dict, steps: int) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    import zoo
    from zoo.nn.torch import SelfAttention

    torch.set_num_threads(1)
    model = zoo.create_model(name, framework="lightning", seed=SEED, **model_fields(spec)).train()
    x, y = (torch.from_numpy(a) for a in batch(spec))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

    def step() -> None:
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=IGNORE_INDEX)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    kernels: Counter = Counter()  # the kernels to isolate, seen in the warm-up step

    def conv_seen(module, inputs) -> None:
        shape = (tuple(inputs[0].shape), tuple(module.weight.shape), module.stride[0], module.padding[0])
        kernels[json.dumps(["conv", *shape])] += 1

    def attention_seen(module, inputs) -> None:
        n, t, _ = inputs[0].shape
        shape = (n, module.num_heads, t, module.head_dim)
        kernels[json.dumps(["attention", shape, len(inputs) > 1 and inputs[1] is not None])] += 1

    seen = {torch.nn.Conv2d: conv_seen, SelfAttention: attention_seen}
    hooks = [m.register_forward_pre_hook(seen[type(m)]) for m in model.modules() if type(m) in seen]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as warm:
        step()  # warm-up (AdamW's state is made here) and every matrix product's shapes
    for hook in hooks:
        hook.remove()
    products: Counter = Counter()
    for e in warm.events():
        matrices = [shape for shape in e.input_shapes if len(shape) == 2]  # addmm: bias, a, b, scalars
        if e.name in ("aten::mm", "aten::addmm") and len(matrices) >= 2:
            products[json.dumps(["matmul", *matrices[-2:]])] += e.self_cpu_time_total
    kernels.update({key: 1 for key, _ in products.most_common(3)})
    step_ms = fastest_ms(step, steps)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            step()
        wall_ms = (time.perf_counter() - started) * 1e3
    ops: Counter = Counter()
    for e in prof.events():
        if e.name.startswith("aten::"):
            context, parent = [], e.cpu_parent
            while parent is not None:
                context, parent = [parent.name, *context], parent.cpu_parent
            op = e.name.removeprefix("aten::")
            ops[(op, category(op, "/".join(context)))] += e.self_cpu_time_total / 1e3
    timed = [{"kernel": json.loads(key), "count": count, "ms": torch_kernel(json.loads(key))}
             for key, count in kernels.items()]  # fmt: skip
    return {**summary(ops, wall_ms, step_ms, steps), "kernels": timed}


def torch_kernel(kernel: list) -> dict[str, float]:
    """One kernel alone, in ms: a convolution's three passes, a product, an attention's forward
    and backward as zoo spells it out and fused."""
    import torch
    import torch.nn.functional as F

    from zoo.nn.torch.attention import attention_probabilities, blocked_mask

    torch.manual_seed(SEED)
    kind, *shape = kernel
    if kind == "matmul":
        a, b = torch.randn(shape[0]), torch.randn(shape[1])
        return {"forward": fastest_ms(lambda: a @ b, 3)}
    if kind == "conv":
        (x_shape, w_shape, s, p), no = shape, None
        x, w = torch.randn(x_shape), torch.randn(w_shape)
        grad = torch.randn_like(F.conv2d(x, w, stride=s, padding=p))

        def backward(mask: list[bool]):
            pads = ([s] * 2, [p] * 2, [1] * 2, False, [0] * 2, 1)  # stride, padding, dilation, ...
            return lambda: torch.ops.aten.convolution_backward(grad, x, w, no, *pads, mask)

        return {"forward": fastest_ms(lambda: F.conv2d(x, w, stride=s, padding=p), 3),
                "backward-input": fastest_ms(backward([True, False, False]), 3),
                "backward-filter": fastest_ms(backward([False, True, False]), 3)}  # fmt: skip
    (n, h, t, d), causal = shape
    q, k, v = (torch.randn(n, h, t, d, requires_grad=True) for _ in range(3))
    blocked = blocked_mask(t, causal=causal)

    def spelled() -> None:
        (attention_probabilities(q @ k.transpose(-2, -1), blocked, d) @ v).sum().backward()

    def fused() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()

    return {"spelled-out": fastest_ms(spelled, 3), "fused": fastest_ms(fused, 3)}


# ------------------------------------------------------------------------------ keras


def profile_keras(name: str, spec: dict, steps: int, kernels: list[dict]) -> dict:
    import keras
    import tensorflow as tf

    import zoo
    from zoo import registry
    from zoo.keras.data import keras_layout

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model = zoo.create_model(name, framework="keras", seed=SEED, **model_fields(spec))
    x, y = batch(spec)
    x = keras_layout(x, registry.get_family(name).input_kind)
    model.compile(
        optimizer=keras.optimizers.AdamW(LR, weight_decay=WEIGHT_DECAY, epsilon=1e-8),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE_INDEX),
        jit_compile=False,
    )

    def step() -> None:
        model.train_on_batch(x, y)  # returns numpy: the step has finished

    step()  # the trace
    step_ms = fastest_ms(step, steps)
    with tempfile.TemporaryDirectory(prefix="zoo-tf-profile-") as logdir:
        tf.profiler.experimental.start(logdir)
        started = time.perf_counter()
        for _ in range(steps):
            step()
        wall_ms = (time.perf_counter() - started) * 1e3
        tf.profiler.experimental.stop()
        ops = xplane_ops(next(Path(logdir).rglob("*.xplane.pb")))
    timed = [{**k, "ms": keras_kernel(k["kernel"])} for k in kernels]
    return {**summary(ops, wall_ms, step_ms, steps), "kernels": timed}


def xplane_ops(path: Path) -> Counter:
    """``{(op type, category): self ms}`` over the host plane's "scope/name:OpType" events.

    Events on one thread's line nest (``ExecutorState::Process`` holds ops; an op may hold
    others): each event's self time is its duration less its direct children's."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # newer wheels ship tsl at the top level
        from tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    ops: Counter = Counter()
    for plane in (p for p in space.planes if p.name == "/host:CPU"):
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            stack: list[list] = []  # [end ps, name, self ps]

            def close(stack: list[list] = stack) -> None:
                _, event, own = stack.pop()
                if match := re.fullmatch(r"([^:\s]+):(\w+)", event):
                    scope, op = match.groups()
                    ops[(op, category(op, scope))] += max(own, 0) / 1e9

            events = sorted((e.offset_ps, e.duration_ps, names[e.metadata_id]) for e in line.events)
            for start, length, event in events:
                while stack and stack[-1][0] <= start:
                    close()
                if stack:
                    stack[-1][2] -= length
                stack.append([start + length, event, length])
            while stack:
                close()
    return ops


def keras_kernel(kernel: list) -> dict[str, float]:
    """``torch_kernel``'s kernels in TensorFlow, laid out as the Keras twin runs them: NHWC,
    torch's padding as explicit zeros then "valid", a strided 1x1 convolution as a subsample
    and a stride-1 one (architectures/resnet/keras_model.py's TorchConv2D)."""
    import keras
    import tensorflow as tf

    from zoo.nn.keras.attention import attention_probabilities, blocked_mask

    tf.random.set_seed(SEED)
    kind, *shape = kernel
    if kind == "matmul":
        a, b = tf.random.normal(shape[0]), tf.random.normal(shape[1])
        return {"forward": fastest_ms(lambda: tf.linalg.matmul(a, b).numpy(), 3)}
    if kind == "conv":
        ((n, c, h, w), (o, _, kh, kw), s, p) = shape
        x = tf.random.normal((n, h + 2 * p, w + 2 * p, c))
        if kh == 1 and s > 1:
            x, s = x[:, ::s, ::s, :], 1
        f = tf.random.normal((kh, kw, c, o))
        grad = tf.random.normal(tf.nn.conv2d(x, f, s, "VALID").shape)
        strides = [1, s, s, 1]
        return {
            "forward": fastest_ms(lambda: tf.nn.conv2d(x, f, s, "VALID").numpy(), 3),
            "backward-input": fastest_ms(lambda: tf.raw_ops.Conv2DBackpropInput(
                input_sizes=x.shape, filter=f, out_backprop=grad, strides=strides, padding="VALID"
            ).numpy(), 3),
            "backward-filter": fastest_ms(lambda: tf.raw_ops.Conv2DBackpropFilter(
                input=x, filter_sizes=f.shape, out_backprop=grad, strides=strides, padding="VALID"
            ).numpy(), 3),
        }  # fmt: skip
    (n, h, t, d), causal = shape
    q, k, v = (tf.Variable(tf.random.normal((n, h, t, d))) for _ in range(3))
    blocked = blocked_mask(t, causal=causal)
    ops = keras.ops

    def spelled():
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        return ops.matmul(attention_probabilities(scores, blocked, d), v)

    def fused():  # Keras' layout is (N, T, heads, head_dim)
        q_, k_, v_ = (ops.transpose(a, (0, 2, 1, 3)) for a in (q, k, v))
        return ops.dot_product_attention(q_, k_, v_, is_causal=causal)

    def with_gradients(forward):
        @tf.function
        def run():
            with tf.GradientTape() as tape:
                total = tf.reduce_sum(forward())
            return tape.gradient(total, [q, k, v])

        return lambda: [g.numpy() for g in run()]

    return {way: fastest_ms(with_gradients(f), 3) for way, f in (("spelled-out", spelled), ("fused", fused))}


# ------------------------------------------------------------------------------ report


def ratio(keras: float, torch: float) -> str:
    return f"{keras / torch:.2f}" if torch > 0 and keras > 0 else "-"


def dims(shape: list) -> str:
    return "x".join(map(str, shape))


def kernel_rows(torch_run: dict, keras_run: dict) -> list[list]:
    """[gap ms over a step, label, pass, count, torch ms, TF ms] for every kernel and pass, the
    largest gap first."""
    rows = []
    for mine, theirs in zip(torch_run["kernels"], keras_run["kernels"], strict=True):
        kind, first, second, *rest = mine["kernel"]
        if kind == "conv":
            label = f"conv {dims(second)} s{rest[0]} on {dims(first)}"
        elif kind == "matmul":
            label = f"matmul {dims(first)} @ {dims(second)}"
        else:
            label = f"attention {dims(first)}{' causal' if second else ''}"
        for way, ms in mine["ms"].items():
            gap = (theirs["ms"][way] - ms) * mine["count"]
            rows.append([gap, label, way, mine["count"], ms, theirs["ms"][way]])
    return sorted(rows, key=lambda row: -abs(row[0]))


def explain(name: str, torch_run: dict, keras_run: dict, rows: list[list]) -> str:
    """The preset's verdict in a sentence, from the figures: the category with the largest gap,
    its largest op in each framework, and the isolated kernel of that category with the largest gap."""
    t, k = torch_run["categories"], keras_run["categories"]
    worst = max(CATEGORIES, key=lambda c: abs(k[c] - t[c]))
    gap, step_gap = k[worst] - t[worst], keras_run["profiled_ms"] - torch_run["profiled_ms"]
    text = (
        f"**{name}**: Keras' step takes {ratio(keras_run['step_ms'], torch_run['step_ms'])}x torch's "
        f"({keras_run['step_ms']:.3g} against {torch_run['step_ms']:.3g} ms). The largest gap is "
        f"*{worst}*: {k[worst]:.3g} ms in Keras, {t[worst]:.3g} ms in torch, "
        f"{'Keras' if gap > 0 else 'torch'} slower by {abs(gap):.3g} ms"
    )
    if gap * step_gap > 0:
        text += f" ({gap / step_gap:.0%} of the profiled steps' difference)"
    for who, run in (("Keras", keras_run), ("torch", torch_run)):
        ops = [(op, ms) for op, c, ms in run["top"] if c == worst]
        if ops:
            text += f"; {who}'s largest op there `{ops[0][0]}` ({ops[0][1]:.3g} ms)"
    family = {"conv forward": "conv", "conv backward": "conv", "matmul": "matmul"}
    related = [r for r in rows if r[1].startswith(family.get(worst, worst.split()[0]))]
    if related:
        _, label, way, count, mine, theirs = related[0]
        text += f". Alone, {label} {way} (x{count} a step) takes {mine:.3g} ms in torch, {theirs:.3g} in TF"
    return text + "."


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def report(results: dict, steps: int) -> str:
    lines = []
    for name, r in results.items():
        t, k = r["lightning"], r["keras"]
        spec = SPECS[name]
        # Bold, not a heading: results_section.write_section's section ends at the next heading.
        lines += [f"**{name}** ({input_words(spec)}, batch {spec['batch']})", ""]
        tc, kc = t["categories"], k["categories"]
        rows = [
            [c, f"{tc[c]:.1f}", f"{kc[c]:.1f}", ratio(kc[c], tc[c])]
            for c in CATEGORIES
            if tc[c] + kc[c] >= 0.1
        ]
        for label, key in (("profiled step", "profiled_ms"), ("step, not profiled", "step_ms")):
            rows.append([f"**{label}**", f"{t[key]:.0f}", f"{k[key]:.0f}", ratio(k[key], t[key])])
        rows.append(["coverage (ops / profiled step)", f"{t['coverage']:.0%}", f"{k['coverage']:.0%}", ""])
        lines += [*table(["category", "torch ms", "Keras ms", "Keras / torch"], rows), ""]
        tops = [[i, f"`{a[0]}`", a[1], f"{a[2]:.1f}", f"`{b[0]}`", b[1], f"{b[2]:.1f}"]
                for i, (a, b) in enumerate(zip(t["top"], k["top"], strict=False), 1)]  # fmt: skip
        lines += [*table(["#", "torch op", "category", "ms", "TF op", "category", "ms"], tops), ""]
        if r["kernels"]:
            rows = [
                [label, way, f"x{n}", f"{a:.2f}", f"{b:.2f}", ratio(b, a)]
                for _, label, way, n, a, b in r["kernels"][:8]
            ]
            lines += [
                *table(["kernel alone", "pass", "per step", "torch ms", "TF ms", "TF / torch"], rows),
                "",
            ]
        lines += [r["explanation"], ""]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset")
    lines.append(
        f"{datetime.date.today()}, commit {commit.stdout.strip()}, 1 kernel thread, float32, AdamW, "
        f"TF_ENABLE_ONEDNN_OPTS {onednn}; ms per step: categories over {steps} profiled steps (self "
        f"time; runtime = what no op holds), the unprofiled step the fastest of {steps} after a "
        f"warm-up; load average {os.getloadavg()[0]:.1f} at the end. Kernels alone: the fastest of 3 "
        "calls (TF's include ~0.1 ms of eager dispatch), sorted by their gap over a step (count x "
        "difference); matmul: torch's three largest products."
    )
    return "\n".join(lines)


def run_one(framework: str, name: str, steps: int, kernels: list | None = None) -> dict:
    """One fresh process: neither framework's threads or allocator touch the other's figures."""
    command = [sys.executable, __file__, "--one", framework, "--presets", name, "--steps", str(steps)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(kernels or [], file)
        file.flush()
        command += ["--kernels", file.name]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"{framework} {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", default="resnet18,lstm-medium-lm,gpt2", help=f"of {', '.join(SPECS)}")
    parser.add_argument("--steps", type=int, default=2, help="timed steps, then as many profiled")
    parser.add_argument("--write-results", action="store_true", help="rewrite this section of RESULTS.md")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--kernels", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = args.presets.split(",")
    if unknown := [n for n in names if n not in SPECS]:
        parser.error(f"unknown presets {unknown}; choose from {', '.join(SPECS)}")
    if args.one == "lightning":
        print(json.dumps(profile_torch(args.presets, SPECS[args.presets], args.steps)))
        return
    if args.one:
        kernels = json.loads(Path(args.kernels).read_text())
        print(json.dumps(profile_keras(args.presets, SPECS[args.presets], args.steps, kernels)))
        return
    started, results = time.perf_counter(), {}
    shown = bar(2 * len(names), "framework profile", unit="run")
    for name in names:
        shown.set_postfix_str(f"{name} torch")
        mine = run_one("lightning", name, args.steps)
        shown.update(1)
        shown.set_postfix_str(f"{name} keras")
        theirs = run_one(
            "keras", name, args.steps, [{"kernel": e["kernel"], "count": e["count"]} for e in mine["kernels"]]
        )
        shown.update(1)
        rows = kernel_rows(mine, theirs)
        explanation = explain(name, mine, theirs, rows)
        results[name] = {"lightning": mine, "keras": theirs, "kernels": rows, "explanation": explanation}
    shown.close()
    text = report(results, args.steps)
    print(text)
    minutes = (time.perf_counter() - started) / 60
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "framework_profile.md").write_text(text + "\n")
    document = {"steps": args.steps, "minutes": minutes, "presets": results}
    (args.out / "framework_profile.json").write_text(json.dumps(document, indent=1))
    if args.write_results:
        write_section(HEADING, text)


if __name__ == "__main__":
    main()
