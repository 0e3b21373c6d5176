"""zoo's twins against the libraries a user would pick instead (issue 41), same weights.

Contenders, each pair on the same weights and checked to compute the same thing first (logits
close, greedy tokens compared) before anything is timed:

- a Llama of ~5M parameters (``generation.LLAMA_5M``), 4 x 128 tokens, float32: forward, train
  step (forward, cross-entropy, backward, Adam), and greedy generation of 64 tokens after
  4 prompts of 16. Peers: transformers ``LlamaForCausalLM`` (sdpa attention, its ``generate``)
  and keras-hub ``LlamaCausalLM`` (``predict_on_batch``, ``train_on_batch``, ``generate``, the
  weights assigned variable by variable). zoo: the torch twin (a plain torch loop; generation
  through ``zoo.sample.generate``) and the Keras twin (forward through
  ``zoo.predict_outputs.logits``, what ``zoo predict`` runs; ``compile`` + ``train_on_batch``;
  ``zoo.sample.generate``, compiled generation);
- timm ``convnext_tiny`` and torchvision ``resnet50`` forward at batch 1 and 8 (224 x 224),
  imported into zoo with ``zoo.interchange.import_checkpoint``; both twins through
  ``zoo.predict_outputs.logits``.

transformers, timm and torchvision cannot live in zoo's environment (tests/reference_env.py):
they run in the reference environment ``.venv-ref``, in a worker process this script starts and
drives over a pipe, with the same thread count. Only one side computes at a time (the other
waits on the pipe), contenders take turns in every round (the order rotated each round), and
each round gives each pair a ratio, peer time / zoo time: above 1, zoo is faster. The table
shows the median ratio and its range over the rounds, at one thread and at all threads (each
setting a fresh process: TensorFlow fixes its thread pools at start).

Also the torch twin's greedy generation with its key/value cache written in place
(``zoo.nn.cache.KeyValueSlots``) against concatenating every token, at 16 + 64 and 16 + 512 tokens.

``--first-step`` (in the same run unless ``--skip-first-step``): the first training step of the
same Llama and of convnet-small in fresh processes, Keras (``compile`` + first
``train_on_batch``, profiled: where the seconds go, zoo's own Python among them) against
torch's first step.

    .venv/bin/python bench/peers.py [--rounds 5] [--threads 1,2] [--write-results]
        [--skip-first-step] [--report bench/out/peers.json]

keras-hub is the ``bench`` extra (``pip install -c constraints.txt -e '.[bench]'``); the
reference environment is built by tests/reference_env.py on first use.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))  # tests.reference_env, when run as a script

SECTION = "## zoo against its peers: transformers, keras-hub, timm, torchvision (`bench/peers.py`)"
BATCH, SEQUENCE, PROMPTS, PROMPT, NEW = 4, 128, 4, 16, 64
IMAGE = 224
RAW = BENCH / "out" / "peers.json"  # every figure of the last run (--report reads it)
LONG_NEW = 512  # the torch twin's cache at a longer generation (cache_bench)
CONVNETS = {"convnext_tiny": "timm", "resnet50": "torchvision"}
# seconds per timed call, roughly: repeats per measurement so each is ~0.2 s or more
REPEATS = {"forward": 5, "train": 3, "generate": 1, "b1": 3, "b8": 1}


# ---------------------------------------------------------------- worker (reference environment)


def worker(threads: int) -> None:
    """Serve the peers' work over stdin/stdout, one JSON object a line each way."""
    import shim  # noqa: F401  (tests/reference: before torchvision and timm)
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    state: dict = {}
    for line in sys.stdin:
        request = json.loads(line)
        reply = WORKER_OPS[request["op"]](state, request)
        sys.stdout.write(json.dumps(reply or {}) + "\n")
        sys.stdout.flush()


def _w_llama(state: dict, request: dict) -> dict:
    import copy

    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(request["dir"], attn_implementation="sdpa", dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    ids = torch.from_numpy(np.load(request["ids"]))
    prompts = torch.from_numpy(np.load(request["prompts"]))
    trained = copy.deepcopy(model).train()
    optimizer = torch.optim.Adam(trained.parameters(), lr=1e-4)
    labels = torch.from_numpy(np.load(request["labels"]))

    def forward():
        with torch.no_grad():
            return model(ids).logits

    def train():
        optimizer.zero_grad(set_to_none=True)
        logits = trained(ids).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        optimizer.step()

    def generate():
        with torch.no_grad():
            out = model.generate(
                prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=NEW, min_new_tokens=NEW,
                do_sample=False,
            )  # fmt: skip
        return out[:, prompts.shape[1] :]

    state.update({"llama.forward": forward, "llama.train": train, "llama.generate": generate})
    np.save(request["out"] + "-logits.npy", forward().numpy())
    np.save(request["out"] + "-tokens.npy", generate().numpy())
    return {"parameters": sum(p.numel() for p in model.parameters())}


def _w_convnet(state: dict, request: dict) -> dict:
    import numpy as np
    import timm
    import torch
    import torchvision
    from safetensors.torch import save_file

    name, folder = request["name"], Path(request["dir"])
    torch.manual_seed(0)
    if CONVNETS[name] == "timm":
        model = timm.create_model(name, pretrained=False)
        timm.models.save_for_hf(model, str(folder))
    else:
        model = getattr(torchvision.models, name)()
        folder.mkdir(parents=True, exist_ok=True)
        folder = folder / f"{name}.safetensors"  # a torchvision state dict: one file
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder))
    model.eval()
    for batch in (1, 8):
        x = torch.from_numpy(np.load(request[f"b{batch}"]))

        def forward(x=x):
            with torch.no_grad():
                return model(x)

        state[f"{name}.b{batch}"] = forward
        np.save(f"{request['out']}-b{batch}.npy", forward().numpy())
    return {"weights": str(folder)}


def _w_time(state: dict, request: dict) -> dict:
    work = state[request["task"]]
    started = time.perf_counter()
    for _ in range(request["repeats"]):
        work()
    return {"seconds": (time.perf_counter() - started) / request["repeats"]}


WORKER_OPS = {"llama": _w_llama, "convnet": _w_convnet, "time": _w_time}


class Worker:
    """The reference environment's worker process, at ``threads`` threads."""

    def __init__(self, threads: int):
        from tests.reference_env import SCRIPTS, python

        env = {**os.environ, "PYTHONPATH": str(SCRIPTS), "CUDA_VISIBLE_DEVICES": ""}
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self.process = subprocess.Popen(
            [str(python()), __file__, "--worker", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip

    def ask(self, op: str, **request) -> dict:
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the reference worker died during {op!r} (its stderr is above)")
        return json.loads(line)

    def timer(self, task: str):
        return lambda repeats: self.ask("time", task=task, repeats=repeats)["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def local_timer(work):
    def timed(repeats: int) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            work()
        return (time.perf_counter() - started) / repeats

    return timed


def rounds(contenders: dict, repeats: int, count: int) -> dict[str, list[float]]:
    """Seconds per call of each contender, ``count`` rounds, the order rotated every round."""
    names = list(contenders)
    for timed in contenders.values():  # warm-up: traces, caches, allocator
        timed(1)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(count):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(contenders[name](repeats))
    return times


def close(name: str, got, want, tolerance: float = 1e-4) -> float:
    """Largest difference relative to the reference's largest value; refuses a larger one."""
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise SystemExit(f"{name}: shape {got.shape}, the peer's {want.shape}")
    error = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))
    if error > tolerance:
        raise SystemExit(
            f"{name}: outputs differ from the peer's by {error:.2e} (relative), over {tolerance}"
        )
    return error


def set_threads(threads: int) -> None:
    import tensorflow as tf
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


# ---------------------------------------------------------------- the Llama


def llama_twins(folder: Path):
    """The torch twin (seeded), the Keras twin loaded from it (bench/generation.py's pair), their
    zoo checkpoint and its transformers export (``hf/``)."""
    from generation import twins

    from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint
    from zoo.checkpoint.tensors import model_tensors
    from zoo.interchange.exporting import export_checkpoint

    config, torch_model, keras_model, _ = twins()
    path = write_checkpoint(
        folder / "llama.safetensors", config, model_tensors(torch_model), framework="lightning"
    )
    export_checkpoint(path, "hf", folder / "hf")
    return config, torch_model, keras_model, read_checkpoint(path)


def keras_hub_llama(config, hf_folder: Path, training: bool):
    """keras-hub's ``LlamaCausalLM`` of ``config``, holding the transformers file's weights
    (keras-hub's own transformers converter's mapping, by variable assignment)."""
    import keras
    import keras_hub
    import numpy as np
    from safetensors.numpy import load_file

    hf = load_file(str(hf_folder / "model.safetensors"))
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_query_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, num_key_value_heads=config.key_value_heads,
        rope_max_wavelength=config.rope_theta, layer_norm_epsilon=config.rms_norm_eps, dropout=0.0,
        tie_word_embeddings=config.tie_word_embeddings,
    )  # fmt: skip

    def put(variable, key: str, transpose: bool = True) -> None:
        value = hf[key].T if transpose else hf[key]
        variable.assign(np.reshape(value, variable.shape))

    embedding = backbone.get_layer("token_embedding")
    put(embedding.embeddings, "model.embed_tokens.weight", transpose=False)
    if not config.tie_word_embeddings:
        put(embedding.reverse_embeddings, "lm_head.weight")
    for i in range(config.num_hidden_layers):
        layer, key = backbone.get_layer(f"transformer_layer_{i}"), f"model.layers.{i}"
        put(layer._self_attention_layernorm.scale, f"{key}.input_layernorm.weight", transpose=False)
        put(layer._feedforward_layernorm.scale, f"{key}.post_attention_layernorm.weight", transpose=False)
        attention = layer._self_attention_layer
        for dense, name in (
            ("_query_dense", "q"),
            ("_key_dense", "k"),
            ("_value_dense", "v"),
            ("_output_dense", "o"),
        ):
            put(getattr(attention, dense).kernel, f"{key}.self_attn.{name}_proj.weight")
        put(layer._feedforward_gate_dense.kernel, f"{key}.mlp.gate_proj.weight")
        put(layer._feedforward_intermediate_dense.kernel, f"{key}.mlp.up_proj.weight")
        put(layer._feedforward_output_dense.kernel, f"{key}.mlp.down_proj.weight")
    put(backbone.get_layer("sequence_output_layernorm").scale, "model.norm.weight", transpose=False)
    model = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
    if training:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=loss, weighted_metrics=[], sampler="greedy")
    else:
        model.compile(sampler="greedy")
    return model


def llama_bench(worker: Worker, folder: Path, count: int) -> dict:
    import keras
    import numpy as np
    import torch

    from zoo.predict_outputs import Model, logits
    from zoo.sample import Sampling, generate

    config, torch_model, keras_model, checkpoint = llama_twins(folder)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, size=(BATCH, SEQUENCE))
    labels = rng.integers(0, config.vocab_size, size=(BATCH, SEQUENCE))
    prompts = rng.integers(0, config.vocab_size, size=(PROMPTS, PROMPT))
    for name, value in (("ids", ids), ("labels", labels), ("prompts", prompts)):
        np.save(folder / f"{name}.npy", value)
    files = {name: str(folder / f"{name}.npy") for name in ("ids", "labels", "prompts")}
    parameters = worker.ask("llama", dir=str(folder / "hf"), out=str(folder / "peer"), **files)["parameters"]
    peer_logits, peer_tokens = np.load(folder / "peer-logits.npy"), np.load(folder / "peer-tokens.npy")

    hub, hub_train = (keras_hub_llama(config, folder / "hf", training) for training in (False, True))
    hub_inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids, bool)}
    room = np.zeros((PROMPTS, PROMPT + NEW), np.int64)
    room[:, :PROMPT] = prompts
    hub_prompts = {
        "token_ids": room,
        "padding_mask": np.arange(PROMPT + NEW)[None].repeat(PROMPTS, 0) < PROMPT,
    }
    twin = Model(checkpoint, keras_model, True)
    keras_train = _keras_trainable(checkpoint)
    torch_train = _torch_trainable(torch_model)
    ids_t, labels_t = torch.from_numpy(ids), torch.from_numpy(labels)

    def torch_forward():
        with torch.no_grad():
            return torch_model(ids_t)

    def torch_step():
        model, optimizer = torch_train
        optimizer.zero_grad(set_to_none=True)
        out = model(ids_t)
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), labels_t.reshape(-1)).backward()
        optimizer.step()

    checks = {
        "torch twin logits": close("torch twin", torch_forward().numpy(), peer_logits),
        "Keras twin logits": close("Keras twin", logits(twin, ids), peer_logits),
        "keras-hub logits": close("keras-hub", hub.predict_on_batch(hub_inputs), peer_logits),
    }
    tokens = {
        "torch twin": generate(torch_model, prompts, NEW, Sampling()),
        "Keras twin": generate(keras_model, prompts, NEW, Sampling()),
        "keras-hub": np.asarray(hub.generate(hub_prompts, stop_token_ids=None)["token_ids"])[:, PROMPT:],
    }
    agreement = {name: float((got == peer_tokens).mean()) for name, got in tokens.items()}
    keras.utils.set_random_seed(0)
    tasks = {
        "forward": {
            "transformers": worker.timer("llama.forward"),
            "keras-hub": local_timer(lambda: hub.predict_on_batch(hub_inputs)),
            "torch twin": local_timer(torch_forward),
            "Keras twin": local_timer(lambda: logits(twin, ids)),
        },
        "train": {
            "transformers": worker.timer("llama.train"),
            "keras-hub": local_timer(lambda: hub_train.train_on_batch(hub_inputs, labels)),
            "torch twin": local_timer(torch_step),
            "Keras twin": local_timer(lambda: keras_train.train_on_batch(ids, labels)),
        },
        "generate": {
            "transformers": worker.timer("llama.generate"),
            "keras-hub": local_timer(lambda: hub.generate(hub_prompts, stop_token_ids=None)),
            "torch twin": local_timer(lambda: generate(torch_model, prompts, NEW, Sampling())),
            "Keras twin": local_timer(lambda: generate(keras_model, prompts, NEW, Sampling())),
        },
    }
    times = {task: rounds(contenders, REPEATS[task], count) for task, contenders in tasks.items()}
    return {"parameters": parameters, "checks": checks, "agreement": agreement, "times": times}


def _keras_trainable(checkpoint):
    """A second Keras twin of the checkpoint, compiled as a user would (Adam, cross-entropy)."""
    import keras

    from zoo.backend import backend_for

    model = backend_for("keras").load(checkpoint)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=loss)
    return model


def _torch_trainable(model):
    import copy

    import torch

    trained = copy.deepcopy(model).train()
    return trained, torch.optim.Adam(trained.parameters(), lr=1e-4)


# ---------------------------------------------------------------- the convnets


def convnet_bench(worker: Worker, folder: Path, count: int) -> dict:
    import numpy as np

    from zoo.backend import backend_for
    from zoo.checkpoint.metadata import read_checkpoint
    from zoo.interchange.importing import import_checkpoint
    from zoo.predict_outputs import Model, logits

    checks, times = {}, {}
    rng = np.random.default_rng(0)
    inputs = {b: rng.normal(size=(b, 3, IMAGE, IMAGE)).astype(np.float32) for b in (1, 8)}
    for b, x in inputs.items():
        np.save(folder / f"image-b{b}.npy", x)
    for name, library in CONVNETS.items():
        source = folder / name
        weights = worker.ask(
            "convnet",
            name=name,
            dir=str(source),
            out=str(folder / f"peer-{name}"),
            b1=str(folder / "image-b1.npy"),
            b8=str(folder / "image-b8.npy"),
        )["weights"]
        imported = import_checkpoint(weights, folder / f"{name}-zoo.safetensors", format=library)
        checkpoint = read_checkpoint(imported.path)
        twins = {
            "torch twin": Model(checkpoint, backend_for("lightning").load(checkpoint).eval(), False),
            "Keras twin": Model(checkpoint, backend_for("keras").load(checkpoint), True),
        }
        for b, x in inputs.items():
            want = np.load(folder / f"peer-{name}-b{b}.npy")
            for twin, model in twins.items():
                checks[f"{name} b{b} {twin}"] = close(f"{name} {twin}", logits(model, x), want, 1e-3)
            contenders = {library: worker.timer(f"{name}.b{b}")}
            contenders |= {
                twin: local_timer(lambda m=model, x=x: logits(m, x)) for twin, model in twins.items()
            }
            times[f"{name} b{b}"] = rounds(contenders, REPEATS[f"b{b}"], count)
    return {"checks": checks, "times": times}


def cache_bench(count: int) -> dict:
    """The torch twin's greedy generation with its key/value cache written in place
    (``zoo.nn.cache.KeyValueSlots``, what ``decode`` uses) against concatenating every token's
    keys and values (what it did before), at the bench's length and a longer one."""
    from unittest import mock

    import numpy as np
    import torch
    from generation import LLAMA_5M

    from zoo import registry
    from zoo.nn.cache import KeyValueSlots
    from zoo.sample import Sampling, generate

    found = {}
    for new, context in ((NEW, 256), (LONG_NEW, 1024)):
        config = registry.resolve_config("llama-micro", **{**LLAMA_5M, "max_position_embeddings": context})
        torch.manual_seed(0)
        model = registry.get_family("llama-micro").build_torch(config).eval()
        prompts = np.random.default_rng(0).integers(0, config.vocab_size, size=(PROMPTS, PROMPT))

        def slots(model=model, prompts=prompts, new=new):
            return generate(model, prompts, new, Sampling())

        def concatenated(model=model, prompts=prompts, new=new):
            with mock.patch.object(KeyValueSlots, "empty", classmethod(lambda cls, limit: None)):
                return generate(model, prompts, new, Sampling())

        if slots().tolist() != concatenated().tolist():
            raise SystemExit("the in-place cache generated other tokens than concatenation")
        times = rounds({"concatenation": local_timer(concatenated), "slots": local_timer(slots)}, 1, count)
        found[f"{PROMPTS} x ({PROMPT} + {new})"] = times
    return found


def run(threads: int, count: int, out: Path) -> None:
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        raise SystemExit(
            "bench/peers.py needs keras-hub, the bench extra: "
            ".venv/bin/pip install -c constraints.txt -e '.[bench]'"
        ) from None
    set_threads(threads)
    worker = Worker(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="zoo-peers-") as folder:
            llama = llama_bench(worker, Path(folder), count)
            convnets = convnet_bench(worker, Path(folder), count)
    finally:
        worker.close()
    cache = cache_bench(count)
    out.write_text(json.dumps({"threads": threads, "llama": llama, "convnets": convnets, "cache": cache}))


# ---------------------------------------------------------------- the first training step


def first_step(model_name: str, framework: str, compiler: str) -> dict:
    """Seconds to the end of the first training step of a fresh process's model (built, weights
    drawn), and of the second; for Keras, ``compile`` + the first ``train_on_batch`` under
    cProfile, split by where the time goes. ``compiler``: ``plain`` (Keras' Adam and
    cross-entropy) or ``zoo`` (zoo's optimizer, loss and metric: ``zoo.keras.steps.compile_for``)."""
    set_threads(1)
    import numpy as np

    from zoo import registry

    if model_name == "llama":
        from generation import LLAMA_5M

        config, task = registry.resolve_config("llama-micro", **LLAMA_5M), "language_modeling"
        x = np.random.default_rng(0).integers(0, config.vocab_size, size=(BATCH, SEQUENCE))
        y = np.random.default_rng(1).integers(0, config.vocab_size, size=(BATCH, SEQUENCE))
    else:
        config = registry.resolve_config("convnet-small", in_channels=1, image_size=8, num_classes=10)
        x, task = config.example_input(32), "classification"
        y = np.random.default_rng(1).integers(0, 10, size=(32,))
    family = registry.get_family(config.architecture)
    if framework == "torch":
        return _torch_first_step(family, config, x, y)
    return _keras_first_step(family, config, task, x, y, compiler)


def _torch_first_step(family, config, x, y) -> dict:
    import torch

    started = time.perf_counter()
    model = family.build_torch(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    built = time.perf_counter()
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    seconds = []
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        out = model(x)
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        optimizer.step()
        seconds.append(time.perf_counter() - ((seconds and sum(seconds) + built) or built))
    return {"build": built - started, "first": seconds[0], "second": seconds[1]}


def _keras_first_step(family, config, task, x, y, compiler: str) -> dict:
    import cProfile
    import pstats

    import keras
    import numpy as np

    from zoo.keras.data import keras_layout
    from zoo.keras.optimizers import build_optimizer
    from zoo.keras.steps import compile_for
    from zoo.recipe.optimization import Adam

    started = time.perf_counter()
    model = family.build_keras(config)
    built = time.perf_counter()
    x = keras_layout(x, family.input_kind(config) if callable(family.input_kind) else family.input_kind)
    profile = cProfile.Profile()
    profile.enable()
    if compiler == "zoo":  # as zoo.keras.trainer: its optimizer, loss and metric, slots built eagerly
        compile_for(model, task, build_optimizer(Adam(lr=1e-3), np.full(1000, 1e-3)))
        model.optimizer.build(model.trainable_variables)
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    model.train_on_batch(x, y)
    profile.disable()
    first = time.perf_counter() - built
    model.train_on_batch(x, y)
    second = time.perf_counter() - built - first
    return {
        "build": built - started,
        "first": first,
        "second": second,
        "profile": _split(pstats.Stats(profile)),
    }


def _split(stats) -> dict:
    """The profiled first step's seconds by where they went: tracing the step into a graph
    (TensorFlow's ``_maybe_define_function``), and within it the optimizer slots created inside
    the trace (``variable_capturing_scope``: Keras builds an unbuilt optimizer there, and
    TensorFlow then traces the step a second time); the first run of the graph (the C++ call,
    which optimizes the graph and runs it); self time by package (zoo's own Python: zoo/ and
    architectures/); and how many times the step was traced."""
    found = {"trace": 0.0, "slots in the trace": 0.0, "graph run": 0.0, "traces": 0}
    own = {"zoo": 0.0, "keras": 0.0, "tensorflow": 0.0}
    root = str(ROOT)
    for (filename, _, function), (_, calls, tottime, cumtime, _) in stats.stats.items():
        if filename.startswith((root + "/zoo/", root + "/architectures/")):
            own["zoo"] += tottime
        elif "/keras/" in filename:
            own["keras"] += tottime
        elif "/tensorflow/" in filename:
            own["tensorflow"] += tottime
        if filename.endswith("tracing_compilation.py") and function == "_maybe_define_function":
            found["trace"] = cumtime
        elif filename.endswith("polymorphic_function.py") and function == "variable_capturing_scope":
            found["slots in the trace"] = cumtime
        elif "TFE_Py_Execute" in function:
            found["graph run"] = tottime
        elif filename.endswith("trainer.py") and function == "one_step_on_data":
            found["traces"] = calls
    return {**found, "self": own}


# ---------------------------------------------------------------- the report


def _subprocess(*args: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        done = subprocess.run([sys.executable, __file__, *args, "--out", out.name], check=False)
        if done.returncode:
            raise SystemExit(f"bench/peers.py {' '.join(args)} failed ({done.returncode})")
        return json.loads(Path(out.name).read_text())


PAIRS = [("transformers", "torch twin"), ("transformers", "Keras twin"), ("keras-hub", "Keras twin")]
WORK = {"forward": "forward, 4 x 128", "train": "train step, 4 x 128", "generate": "greedy, 4 x (16 + 64)"}


def ratio_cell(times: dict, peer: str, zoo: str) -> str:
    ratios = [p / z for p, z in zip(times[peer], times[zoo], strict=True)]
    return f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})"


def time_cell(seconds: list[float], task: str) -> str:
    median = statistics.median(seconds)
    if task == "generate":
        return f"{PROMPTS * NEW / median:.0f} tok/s"
    return f"{median * 1e3:.1f} ms"


def report(runs: list[dict], first: dict | None, count: int) -> str:
    settings = [f"{run['threads']} thread{'s' * (run['threads'] > 1)}" for run in runs]
    llama = runs[0]["llama"]
    lines = [
        f"Same weights in every contender, checked first: logits within {_worst(runs, 'llama'):.1e} "
        f"(relative) of transformers' for the Llama, {_worst(runs, 'convnets'):.1e} of timm's / "
        f"torchvision's for the convnets; greedy tokens equal to transformers' "
        + ", ".join(f"{name} {share:.0%}" for name, share in llama["agreement"].items())
        + f". Llama of {llama['parameters'] / 1e6:.1f}M parameters, float32. Ratio = peer time / zoo "
        f"time in the same round (above 1: zoo faster), median (min-max) of {count} interleaved rounds; "
        "peers from transformers, timm and torchvision run in the reference environment (a worker "
        "process at the same thread count, idle while zoo runs).",
        "",
        "| work | peer | zoo | " + " | ".join(settings) + " |",
        "|---|---|---|" + "---|" * len(runs),
    ]
    for task, work in WORK.items():
        for peer, zoo in PAIRS:
            cells = [ratio_cell(run["llama"]["times"][task], peer, zoo) for run in runs]
            lines.append(f"| {work} | {peer} | {zoo} | " + " | ".join(cells) + " |")
    for case, contenders in runs[0]["convnets"]["times"].items():
        peer = next(iter(contenders))
        for zoo in ("torch twin", "Keras twin"):
            cells = [ratio_cell(run["convnets"]["times"][case], peer, zoo) for run in runs]
            lines.append(f"| {case.replace(' b', ', batch ')} | {peer} | {zoo} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Medians:",
        "",
        "| work | contender | " + " | ".join(settings) + " |",
        "|---|---|" + "---|" * len(runs),
    ]
    for task, work in WORK.items():
        for name in runs[0]["llama"]["times"][task]:
            cells = [time_cell(run["llama"]["times"][task][name], task) for run in runs]
            lines.append(f"| {work} | {name} | " + " | ".join(cells) + " |")
    for case, contenders in runs[0]["convnets"]["times"].items():
        for name in contenders:
            cells = [time_cell(run["convnets"]["times"][case][name], case) for run in runs]
            lines.append(f"| {case.replace(' b', ', batch ')} | {name} | " + " | ".join(cells) + " |")
    lines += ["", *cache_lines(runs, settings)]
    if first:
        lines += ["", *first_step_lines(first)]
    return "\n".join(lines)


def _worst(runs: list[dict], part: str) -> float:
    return max(value for run in runs for value in run[part]["checks"].values())


def cache_lines(runs: list[dict], settings: list[str]) -> list[str]:
    lines = [
        "The torch twin's greedy generation, its key/value cache written in place "
        "(`zoo.nn.cache.KeyValueSlots`) against concatenated every token (before): same tokens; "
        "ratio = concatenation's time / in place's.",
        "",
        "| generation | " + " | ".join(f"{s}: concatenated / in place, ratio" for s in settings) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for case in runs[0]["cache"]:
        cells = []
        for run in runs:
            times, new = run["cache"][case], LONG_NEW if str(LONG_NEW) in case else NEW
            rate = {name: f"{PROMPTS * new / statistics.median(v):.0f} tok/s" for name, v in times.items()}
            cells.append(
                f"{rate['concatenation']} / {rate['slots']}, {ratio_cell(times, 'concatenation', 'slots')}"
            )
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def first_step_lines(first: dict) -> list[str]:
    lines = [
        "First training step, fresh process, one thread, build excluded (Keras: `compile` and the "
        "first `train_on_batch`; torch: the first forward, backward and Adam step), and where the "
        "Keras seconds go (cProfile, which slows Python a little: cumulative seconds of the "
        "trace, of the optimizer slots created inside it, of the first graph run; self time of "
        "zoo's own Python):",
        "",
        "| model | contender | first step (s) | second (s) | traces | trace | slots in the trace "
        "| first graph run | zoo's own Python |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, found in first.items():
        profile = found.get("profile")
        extra = " | ".join(["-"] * 5)
        if profile:
            extra = (
                f"{profile['traces']} | {profile['trace']:.2f} | {profile['slots in the trace']:.2f} | "
                f"{profile['graph run']:.2f} | {profile['self']['zoo']:.2f}"
            )
        model, contender = key.split(":")
        lines.append(f"| {model} | {contender} | {found['first']:.2f} | {found['second']:.3f} | {extra} |")
    return lines


FIRST_STEPS = [
    ("llama", "torch", "plain"), ("llama", "keras", "plain"), ("llama", "keras", "zoo"),
    ("convnet", "torch", "plain"), ("convnet", "keras", "plain"), ("convnet", "keras", "zoo"),
]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--skip-first-step", action="store_true")
    parser.add_argument("--report", type=Path, help="write the table again from a run's raw figures (RAW)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--first-step", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker)
        return 0
    sys.path.insert(0, str(BENCH))
    if args.run is not None:
        run(args.run, args.rounds, args.out)
        return 0
    if args.first_step:
        args.out.write_text(json.dumps(first_step(*args.first_step)))
        return 0
    if args.report:  # the figures of an earlier run (its RAW file), written again
        saved = json.loads(args.report.read_text())
        return finish(saved["runs"], saved["first"], saved["rounds"], args.write_results)
    threads = sorted({int(t) for t in args.threads.split(",")})
    RAW.parent.mkdir(exist_ok=True)
    runs = []
    for t in threads:  # each setting's figures kept as they come (RAW), for --report
        runs.append(_subprocess("--run", str(t), "--rounds", str(args.rounds)))
        RAW.write_text(json.dumps({"runs": runs, "first": None, "rounds": args.rounds}))
    first = None
    if not args.skip_first_step:
        first = {
            f"{model}:{'torch' if framework == 'torch' else f'Keras, {compiler} compile'}":
            _subprocess("--first-step", model, framework, compiler)
            for model, framework, compiler in FIRST_STEPS
        }  # fmt: skip
    RAW.write_text(json.dumps({"runs": runs, "first": first, "rounds": args.rounds}))
    return finish(runs, first, args.rounds, args.write_results)


def finish(runs: list[dict], first: dict | None, count: int, write: bool) -> int:
    text = report(runs, first, count)
    print(text)
    if write:
        from results_section import write_section

        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
