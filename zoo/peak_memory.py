"""The peak memory a command will need, estimated from the config before anything is built.

A command that builds models it has no memory for is killed by the kernel part-way, with
nothing said (a bert-base compare builds six models; one was killed at 10.4 GB). So compare,
train, evaluate and import add up what they will hold at their peak, from the weight table's
shapes and a forward pass traced on torch's ``meta`` device (shapes only, no memory), and
refuse before building anything when the machine has less available, with both numbers and
what would fit. bench/memory_estimate.py measures the estimates against real peaks.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

try:  # optional: the kernel's estimate is read from /proc/meminfo without it
    import psutil
except ImportError:
    psutil = None

from zoo.hardware import SetupError
from zoo.model_memory import activation_bytes, parameter_bytes
from zoo.precision import DTYPES, PRECISIONS

if TYPE_CHECKING:
    from collections.abc import Callable

    from zoo.data import Dataset
    from zoo.family import ArchitectureConfig, Family

AVAILABLE_VARIABLE = "ZOO_AVAILABLE_MEMORY"
# zoo train's peaks, measured by bench/memory_estimate.py --train (bench/RESULTS.md): gpt2 at
# 1-12 layers and bert-base at 4-12 layers (11M-89M parameters, batch 2 of 64 tokens), resnet50
# at 64 and 128 px, a pass and an evaluation batch larger than the weights. Lightning's peak grows
# by 7.4-7.9 float32 copies of the weights per parameter, Keras' by 8.1-9.0 (runs of one shape
# differ by up to 0.45 GB in Keras, 0.3 GB in Lightning). The estimate counts the copies it can
# name (weights, gradients, Adam's two moments, the saved state; in Keras the initial tensors fit
# keeps) and these:
# - one more copy in both, what the allocator keeps of the steps' freed gradients and temporaries
#   (Lightning's steps hold 3.7 copies where gradients and moments are 3, rising step by step);
ALLOCATOR_COPIES = 1
# - what Keras' fit holds from its first step on beyond those (TensorFlow's gradients and update
#   arithmetic in the traced step, and the allocator's arenas of its threads): 9 copies measured
#   on average, 6 named, one more for the spread between runs;
KERAS_FIT_COPIES = 4
# - a training pass holds about twice what the meta trace counts: the backward's gradients of the
#   activations beside them (Lightning, gpt2 at 4 x 256 tokens: 1.8 times the trace), and Keras'
#   convolutions keep twice torch's (resnet50 at 128 px: 2.1);
PASS_COPIES = 2
# - an evaluation pass, 1.2 times its two largest outputs (the loss's log-probabilities beside the
#   logits: Lightning, gpt2 at 256 x 64 tokens);
EVAL_COPIES = 1.5
# - the process before the model: the libraries (torch, for the estimate's trace, in both), the
#   data, and with Keras the traced step. The peaks' intercepts: 0.26-0.48 GB with Lightning; with
#   Keras 0.88-1.05 GB for the transformers and 1.2-1.3 GB for resnet50, whose traced step
#   (161 layers of convolutions and their gradients) costs 0.35 GB at its first step.
TRAIN_RUNTIME_BYTES = {"lightning": int(0.5 * 2**30), "keras": int(1.3 * 2**30)}
# What a process holds once the frameworks are imported and have run a step (their
# libraries, kernels, graph caches), measured by bench/memory_estimate.py on this project's
# CPU machine: torch with Lightning, and TensorFlow with Keras.
RUNTIME_BYTES = {"torch": 700 * 2**20, "tensorflow": 900 * 2**20}
# What a comparison that trains holds beyond the tensors compare_estimate counts: both frameworks
# with the training steps they traced in two precisions (Lightning's and train_on_batch's), and
# the pages glibc keeps freed between trims. Measured by bench/memory_estimate.py as the peaks of
# gpt2 comparisons at 4, 6 and 8 layers less the 28 float32 copies of their weights counted:
# 2.26, 2.25 and 2.24 GB. (A 0.4M-parameter comparison's whole peak is 1.1 GB: the traced steps
# and the kept pages grow with the model, so this overestimates the smallest ones.)
COMPARE_RUNTIME_BYTES = int(2.25 * 2**30)
# The training batches a comparison keeps (zoo.compare.steps.training_batches: every step's batch
# from both pipelines, for the reference pair, the Keras losses and the re-synchronised checks),
# per step beyond its data: the four tensor objects of a batch in torch and TensorFlow. Measured
# on gpt2-micro-pydocs (32 x 128 int64 tokens): 133 KB a step, two copies of its 64 KB and 5 KB.
BATCH_OBJECT_BYTES = 5 * 2**10
UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
         "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}  # fmt: skip


class MemoryShort(SetupError):
    """The estimated peak is more than the machine has available: nothing was built."""


@dataclass(frozen=True)
class Estimate:
    """The peak a command will need, as named parts (bytes), so a refusal can say where it goes."""

    job: str
    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        shown = ", ".join(f"{name} {gib(size)}" for name, size in self.parts.items() if size)
        return f"{gib(self.total)} ({shown})"


def gib(size: float) -> str:
    return f"{size / 2**30:.1f} GB"


def parameter_scale(precision: str) -> float:
    """Bytes of a parameter in ``precision`` over its float32 bytes (mixed ones keep float32)."""
    return PRECISIONS[precision].bytes_per_parameter / DTYPES["float32"].bytes


def optimizer_slots(optimizer: Any) -> int:
    """Tensors the size of the model an optimizer keeps: Adam's two moments, SGD's momentum."""
    if optimizer.name in ("adam", "adamw"):
        return 2
    return 1 if getattr(optimizer, "momentum", 0) else 0


def compare_estimate(
    recipe, family: Family, config: ArchitectureConfig, inputs: Any, *, fine_tune: bool, training: bool,
    kept_batches: int = 0, batch_bytes: int = 0,
) -> Estimate:  # fmt: skip
    """``zoo compare``'s peak, counted from what its sections hold (zoo.compare.resync).

    Two pairs of twins (a torch and a Keras model each) live through the parity sections:
    the recipe's precision, and the reference precision its rounding is measured against,
    checked last. With ``training`` the peak is the last pair's re-synchronised update: both
    pairs, each Keras twin's optimizer slots, the updating torch optimizer's state and the
    gradient fed to it, the snapshot the update starts from, and the gradients and moves
    of both pairs, kept to be judged together; or, where activations outweigh the update,
    that pair's pass. Without training there are no optimizers, snapshot or moves. The speed
    section comes after the parity pairs are freed, with one pair in the recipe's precision
    and its activations: never more than the parity sections (bench/memory_estimate.py
    measures both against real peaks).

    ``kept_batches`` training batches of ``batch_bytes`` each (one batch's tensors in torch's
    pipeline) are held through the training section, once per framework: a count of steps
    asks for memory in proportion (:func:`compared_batches`)."""
    weights = parameter_bytes(family, config)
    scale = parameter_scale(recipe.trainer.precision)
    above = PRECISIONS[recipe.trainer.precision].reference
    last = parameter_scale(above) if above else scale  # the pair checked last
    pairs = [scale] + ([last] if above else [])
    kept = max(scale, 1.0)  # copies of the recipe pair's tensors: float32 unless it is float64
    slots = optimizer_slots(recipe.optimizer) if training else 0
    # The recipe pair's gradients (and moves) in both frameworks, kept beside the last pair's
    # three: its torch gradients, Keras's own, and their copy in the canonical layout (in an
    # update: torch's, the copy, and the one fed to the torch twin).
    judged = (4 if training else 2) * weights * kept if above else 0
    parts = {
        "twins": 2 * weights * sum(pairs),
        "initial tensors": weights * (1 + fine_tune),  # both pairs are reset to them between checks
        "optimizer state": slots * weights * sum(max(p, 1.0) for p in pairs),  # the Keras twins' slots
        "snapshot": weights * kept * bool(training),
        "gradients and moves": judged + 3 * weights * last,
        "activations": 0,
    }
    # The update adds the torch optimizer's state (loaded for it only); the pass before it, the
    # batch's activations: the larger of the two is the peak.
    torch_state, activations = slots * weights * last, activation_bytes(family, config, inputs) * last
    if torch_state > activations:
        parts["optimizer state"] += torch_state
    else:
        parts["activations"] = activations
    parts["frameworks"] = (
        COMPARE_RUNTIME_BYTES if training else RUNTIME_BYTES["torch"] + RUNTIME_BYTES["tensorflow"]
    )
    if kept_batches:
        parts["training batches"] = kept_batches * (2 * batch_bytes + BATCH_OBJECT_BYTES)
    return Estimate("zoo compare", {name: int(size) for name, size in parts.items()})


def compared_batches(steps: int, steps_per_epoch: int) -> int:
    """The batches a comparison of ``steps`` training steps holds at once: the steps' own, and
    while they are drawn, the rest of the last epoch the torch pipeline yields (whole epochs)."""
    epochs = math.ceil(steps / max(steps_per_epoch, 1))
    return max(steps, epochs * steps_per_epoch)


def train_estimate(
    recipe, family: Family, config: ArchitectureConfig, inputs: Any, fine_tune: bool, evaluated: Any = None
) -> Estimate:
    """One twin training: its weights, gradients and optimizer state, what the framework keeps
    beside them (above: ALLOCATOR_COPIES, Keras' initial tensors), and the largest of what comes
    and goes: one training batch's pass (with what Keras' fit holds per step), one evaluation
    batch's (``evaluated``: validation and test run at ``data.eval_batch_size``, 512 by default),
    or the copy of the weights and optimizer state a saved training state is written from.
    bench/memory_estimate.py --train measures it against real runs."""
    weights = parameter_bytes(family, config)
    scale = parameter_scale(recipe.trainer.precision)
    slots = optimizer_slots(recipe.optimizer)
    framework = recipe.trainer.framework
    keras = framework == "keras"
    checkpointing = recipe.trainer.gradient_checkpointing
    step = activation_bytes(family, config, inputs, checkpointing=checkpointing) * max(scale, 1)
    evaluation = 0 if evaluated is None else activation_bytes(family, config, evaluated, training=False)
    passing = [  # one of these at a time
        {"activations": PASS_COPIES * step, "Keras fit": KERAS_FIT_COPIES * weights * scale * keras},
        {"evaluation batch": EVAL_COPIES * evaluation * max(scale, 1)},
        # written while the allocator still holds what the last step's pass freed (Lightning: the
        # copy adds its 3 copies of the weights on top of the steps' peak)
        {"saved state": (1 + slots) * weights * max(scale, 1) + step},
    ]
    largest = max(passing, key=lambda parts: sum(parts.values()))
    return Estimate("zoo train", {
        "weights and gradients": int(2 * weights * scale),
        "optimizer state": int(slots * weights * scale),
        "checkpoint": weights * fine_tune,
        "initial tensors": weights * keras,  # float32, kept by zoo.keras.trainer.fit to its end
        "kept by the allocator": int(ALLOCATOR_COPIES * weights * scale),
        **{name: int(size) if parts is largest else 0 for parts in passing for name, size in parts.items()},
        "framework": TRAIN_RUNTIME_BYTES[framework],
    })  # fmt: skip


def evaluate_estimate(family: Family, config: ArchitectureConfig, inputs: Any, framework: str) -> Estimate:
    """A checkpoint read (float32) into one twin, and one evaluation batch going through it."""
    weights = parameter_bytes(family, config)
    return Estimate("zoo evaluate", {
        "weights": 2 * weights,
        "activations": activation_bytes(family, config, inputs, training=False),
        "framework": RUNTIME_BYTES["torch" if framework == "lightning" else "tensorflow"],
    })  # fmt: skip


def import_estimate(
    sources: list[Path], torch_suffixes: tuple[str, ...] = (), expands: float = 1.0
) -> Estimate:
    """The foreign files read whole, their tensors re-laid out (``expands`` times their bytes: a
    quantized file's integers become float32 weights), and the checkpoint's bytes; torch's
    libraries too where a file is a pickled state dict (``torch_suffixes``) torch reads."""
    size = sum(path.stat().st_size for path in sources)
    reads_torch = any(path.suffix in torch_suffixes for path in sources)
    return Estimate("zoo import", {
        "foreign tensors": size, "converted tensors": int(size * expands), "checkpoint": size,
        "framework": RUNTIME_BYTES["torch"] * reads_torch,
    })  # fmt: skip


def first(x: Any, count: int) -> Any:
    """The first ``count`` examples of a split's inputs (an array, or image files decoded)."""
    return x[: min(count, len(x))]


def like(x: Any, count: int) -> np.ndarray:
    """``count`` examples (at most the split's) shaped as the split's first, uninitialised: the
    estimate reads only their shape, so no image is decoded and no page is touched."""
    one = np.asarray(first(x, 1))
    return np.empty((min(count, len(x)), *one.shape[1:]), one.dtype)


def training_estimator(
    recipe, family: Family, config: ArchitectureConfig, dataset: Dataset, *, fine_tune: bool
) -> Callable[[int, int], Estimate]:
    """``zoo train``'s estimate at a batch size and an evaluation batch size: the first
    examples of the training split, and as many shaped as the larger split evaluated."""
    evaluated = max((dataset.val.x, dataset.test.x), key=len)

    def estimate(size: int, eval_size: int) -> Estimate:
        evaluation = like(evaluated, max(eval_size, 1)) if len(evaluated) else None
        return train_estimate(
            recipe, family, config, first(dataset.train.x, max(size, 1)), fine_tune, evaluation
        )

    return estimate


def check_training(
    recipe, family: Family, config: ArchitectureConfig, dataset: Dataset, *, fine_tune: bool
) -> None:
    """Refuse, before the run folder exists, a run whose estimated peak is more than the
    machine has available, saying what would fit: a smaller batch or evaluation batch,
    gradient checkpointing. With no limit to compare against (``unlimited``, or a system that
    does not say), nothing is estimated: the trace would load torch into a Keras run for nothing."""
    available = available_bytes()
    if available is None:
        return
    batch = recipe.data.batch_size // max(recipe.trainer.devices * recipe.trainer.num_nodes, 1)
    eval_batch = recipe.data.eval_batch_size
    estimate = training_estimator(recipe, family, config, dataset, fine_tune=fine_tune)
    wanted = estimate(batch, eval_batch)
    if wanted.total <= available:
        return
    fits = []
    if wanted.parts["evaluation batch"]:
        smaller = next(
            (b for b in _smaller_batches(eval_batch) if estimate(batch, b).total <= available), None
        )
        if smaller is not None:
            fits.append(f"--set data.eval_batch_size={smaller}")
    smaller = next((b for b in _smaller_batches(batch) if estimate(b, eval_batch).total <= available), None)
    if smaller is not None:
        fits.append(f"--set data.batch_size={smaller}")
    trainer = recipe.trainer
    if not trainer.gradient_checkpointing and family.supports_grad_checkpointing(trainer.framework):
        recomputing = recipe.model_copy(
            update={"trainer": trainer.model_copy(update={"gradient_checkpointing": True})}
        )
        checkpointed = training_estimator(recomputing, family, config, dataset, fine_tune=fine_tune)
        needs = checkpointed(batch, eval_batch).total
        if needs <= available:
            fits.append(
                f"--set trainer.gradient_checkpointing=true (about {gib(needs)}: the activations recomputed "
                "block by block)"
            )
    if not fits:
        fits.append("a machine with more memory: even one example per batch does not fit")
    check_memory(wanted, fits, available)


def check_evaluation(family: Family, config: ArchitectureConfig, x: Any, batch: int, framework: str) -> None:
    """Refuse, before the checkpoint is loaded into a twin, an evaluation that does not fit."""
    available = available_bytes()
    if available is None:  # nothing to compare against (as check_training)
        return

    def estimate(size: int) -> Estimate:
        return evaluate_estimate(family, config, first(x, max(size, 1)), framework)

    wanted = estimate(batch)
    if wanted.total <= available:
        return
    smaller = next((b for b in _smaller_batches(batch) if estimate(b).total <= available), None)
    fits = [f"--set data.eval_batch_size={smaller}"] if smaller is not None else []
    check_memory(
        wanted, fits or ["a machine with more memory: even one example per batch does not fit"], available
    )


def _smaller_batches(batch: int) -> list[int]:
    """Halvings of ``batch`` down to 1: the batch sizes a refusal tries."""
    sizes = []
    while batch > 1:
        batch //= 2
        sizes.append(batch)
    return sizes


def available_bytes() -> int | None:
    """What this process may still take: ``$ZOO_AVAILABLE_MEMORY`` when set (a size such as
    ``6GB``, or ``unlimited`` to skip the check), else the kernel's own estimate (psutil, or
    MemAvailable in /proc/meminfo); None where neither says."""
    text = os.environ.get(AVAILABLE_VARIABLE, "").strip()
    if text:
        return parse_size(text)
    return kernel_available_bytes()


def kernel_available_bytes() -> int | None:
    """The kernel's estimate of the memory available to new work (psutil, or MemAvailable in
    /proc/meminfo), whatever ``$ZOO_AVAILABLE_MEMORY`` says; None where neither says."""
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def parse_size(text: str) -> int | None:
    """``6GB``, ``512m``, ``2.5GiB`` or a byte count; ``unlimited``/``off`` is None (no check)."""
    if text.lower() in ("unlimited", "off", "none"):
        return None
    number = text.rstrip("bBkKmMgGtTiI ")
    unit = text[len(number) :].strip().lower()
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if unit not in UNITS or not value >= 0 or math.isinf(value):
        raise SetupError(
            f"{AVAILABLE_VARIABLE}={text!r} is not a size; give one such as 6GB or 512MB "
            "(or 'unlimited' to skip zoo's memory check)"
        )
    return int(value * UNITS[unit])


def check_memory(estimate: Estimate, fits: list[str], available: int | None = None) -> None:
    """Refuse, before anything is built, a job whose estimated peak is more than what is
    ``available`` (default: :func:`available_bytes`), with both numbers and ``fits``: the changes
    that would bring it within."""
    available = available_bytes() if available is None else available
    if available is None or estimate.total <= available:
        return
    where = f"${AVAILABLE_VARIABLE}" if os.environ.get(AVAILABLE_VARIABLE, "").strip() else "this machine"
    raise MemoryShort(
        f"{estimate.job} needs about {estimate.describe()} at its peak, but {where} has {gib(available)} "
        f"available; {'; or '.join(fits) if fits else 'free some memory'}. Nothing was built. If you know "
        f"better (swap, memory freed meanwhile), set {AVAILABLE_VARIABLE} to what may be used (e.g. 32GB) "
        "or to 'unlimited'"
    )
