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

from zoo.hardware import SetupError

if TYPE_CHECKING:
    from zoo.family import ArchitectureConfig, Family

AVAILABLE_VARIABLE = "ZOO_AVAILABLE_MEMORY"
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


def parameter_bytes(family: Family, config: ArchitectureConfig) -> int:
    """The model's tensors in the checkpoint's float32, from the weight table: nothing is built."""
    from zoo.weights import tensor_specs

    return sum(math.prod(spec.shape) * 4 for spec in tensor_specs(family.weight_table(config)).values())


def activation_bytes(family: Family, config: ArchitectureConfig, inputs: Any, training: bool = True) -> int:
    """What one float32 forward pass of the torch twin keeps for the backward (``training``),
    or the largest two module outputs alive at once (inference), traced on torch's ``meta``
    device: shapes only, no memory. ``inputs`` is a numpy batch in the canonical layout.
    0 when the family's twin cannot be built there (the estimate then counts weights only)."""
    import torch

    try:
        with torch.device("meta"):
            model = family.build_torch(config)
        x = torch.empty(inputs.shape, dtype=torch.from_numpy(inputs[:0]).dtype, device="meta")
        parameters = {p.untyped_storage()._cdata for p in model.parameters()}
        saved: dict[int, int] = {}
        kept: list[Any] = []  # alive until counted, so no storage address is reused

        def pack(tensor):
            storage = tensor.untyped_storage()
            if storage._cdata not in parameters:
                saved.setdefault(storage._cdata, storage.nbytes())
                kept.append(tensor)
            return tensor

        outputs: list[int] = []
        hooks = [
            m.register_forward_hook(lambda m, a, out: outputs.append(_nbytes(out)))
            for m in model.modules()
            if not list(m.children())
        ]
        model.train(training)
        with torch.set_grad_enabled(training), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            output = model(x)
        for hook in hooks:
            hook.remove()
    except Exception:  # a twin that does not build or run on meta tensors: weights only
        return 0
    if training:
        return sum(saved.values()) + 2 * _nbytes(output)  # the loss keeps its own copy of the output
    return sum(sorted(outputs)[-2:])


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return 0


def parameter_scale(precision: str) -> float:
    """Bytes of a parameter in ``precision`` over its float32 bytes (mixed ones keep float32)."""
    from zoo.recipe.capabilities import PRECISIONS

    return {"float64": 2.0, "float32": 1.0}.get(PRECISIONS[precision].parameters, 0.5)


def optimizer_slots(optimizer: Any) -> int:
    """Tensors the size of the model an optimizer keeps: Adam's two moments, SGD's momentum."""
    if optimizer.name in ("adam", "adamw"):
        return 2
    return 1 if getattr(optimizer, "momentum", 0) else 0


def compare_estimate(
    recipe, family: Family, config: ArchitectureConfig, inputs: Any, *, fine_tune: bool, training: bool
) -> Estimate:
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
    measures both against real peaks)."""
    from zoo.compare.tolerances import reference_precision

    weights = parameter_bytes(family, config)
    scale = parameter_scale(recipe.trainer.precision)
    above = reference_precision(recipe.trainer.precision)
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
    return Estimate("zoo compare", {name: int(size) for name, size in parts.items()})


def train_estimate(
    recipe, family: Family, config: ArchitectureConfig, inputs: Any, fine_tune: bool
) -> Estimate:
    """One twin training: its weights, gradients and optimizer state, and one batch's activations."""
    weights = parameter_bytes(family, config)
    scale = parameter_scale(recipe.trainer.precision)
    return Estimate("zoo train", {
        "weights and gradients": int(2 * weights * scale),
        "optimizer state": int(optimizer_slots(recipe.optimizer) * weights * scale),
        "checkpoint": weights * fine_tune,
        "activations": int(activation_bytes(family, config, inputs) * max(scale, 1)),
        "framework": RUNTIME_BYTES["torch" if recipe.trainer.framework == "lightning" else "tensorflow"],
    })  # fmt: skip


def evaluate_estimate(family: Family, config: ArchitectureConfig, inputs: Any, framework: str) -> Estimate:
    """A checkpoint read (float32) into one twin, and one evaluation batch going through it."""
    weights = parameter_bytes(family, config)
    return Estimate("zoo evaluate", {
        "weights": 2 * weights,
        "activations": activation_bytes(family, config, inputs, training=False),
        "framework": RUNTIME_BYTES["torch" if framework == "lightning" else "tensorflow"],
    })  # fmt: skip


def import_estimate(sources: list[Path], torch_suffixes: tuple[str, ...] = ()) -> Estimate:
    """The foreign files read whole, their tensors re-laid out, and the checkpoint's bytes;
    torch's libraries too where a file is a pickled state dict (``torch_suffixes``) torch reads."""
    size = sum(path.stat().st_size for path in sources)
    reads_torch = any(path.suffix in torch_suffixes for path in sources)
    return Estimate("zoo import", {
        "foreign tensors": size, "converted tensors": size, "checkpoint": size,
        "framework": RUNTIME_BYTES["torch"] * reads_torch,
    })  # fmt: skip


def first(x: Any, count: int) -> Any:
    """The first ``count`` examples of a split's inputs (an array, or image files decoded)."""
    return x[: min(count, len(x))]


def check_training(recipe, family: Family, config: ArchitectureConfig, x: Any, *, fine_tune: bool) -> None:
    """Refuse, before the run folder exists, a run whose estimated peak is more than the
    machine has available, saying what would fit: a smaller batch, gradient checkpointing."""
    available = available_bytes()
    batch = recipe.data.batch_size // max(recipe.trainer.devices * recipe.trainer.num_nodes, 1)

    def estimate(size: int) -> Estimate:
        return train_estimate(recipe, family, config, first(x, max(size, 1)), fine_tune)

    wanted = estimate(batch)
    if available is None or wanted.total <= available:
        return
    fits = []
    smaller = next((b for b in _smaller_batches(batch) if estimate(b).total <= available), None)
    if smaller is not None:
        fits.append(f"--set data.batch_size={smaller}")
    if not recipe.trainer.gradient_checkpointing and wanted.parts["activations"] > wanted.total - available:
        fits.append(
            f"--set trainer.gradient_checkpointing=true (recomputes the {gib(wanted.parts['activations'])} "
            "of activations block by block)"
        )
    if not fits:
        fits.append("a machine with more memory: even one example per batch does not fit")
    check_memory(wanted, fits, available)


def check_evaluation(family: Family, config: ArchitectureConfig, x: Any, batch: int, framework: str) -> None:
    """Refuse, before the checkpoint is loaded into a twin, an evaluation that does not fit."""
    available = available_bytes()

    def estimate(size: int) -> Estimate:
        return evaluate_estimate(family, config, first(x, max(size, 1)), framework)

    wanted = estimate(batch)
    if available is None or wanted.total <= available:
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
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
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
