"""What the recipe's words mean in each framework: one table per framework.

A recipe names precisions and strategies in one vocabulary (Lightning's precision words;
each framework's own strategy names). Each framework's :class:`Capabilities` says what
those words become there, which strategies it runs itself, and what a data-parallel
strategy written for the other framework turns into. The schema refuses what a table
refuses; the backends read their setting from here. Nothing here looks at the machine:
what needs a GPU is stated here and checked when a run starts (``zoo.hardware``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

FRAMEWORKS = ("lightning", "keras")
FRAMEWORK_ALIASES = {"torch": "lightning", "pytorch": "lightning", "tensorflow": "keras"}

Precision = Literal["32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"]
Strategy = Literal["auto", "ddp", "fsdp", "mirrored", "multi_worker_mirrored"]
Accelerator = Literal["auto", "cpu", "gpu"]


def normalize_framework(value: Any) -> Any:
    """``"torch"`` is accepted wherever a framework is named; it means ``"lightning"``."""
    return FRAMEWORK_ALIASES.get(value, value) if isinstance(value, str) else value


@dataclass(frozen=True)
class PrecisionMeaning:
    """What a precision word means in both frameworks: the dtype the weights are kept in,
    the dtype the matrix products run in, and what to use instead on a CPU (float16 has
    no fast CPU kernels; Lightning would silently run bf16 there)."""

    parameters: str
    products: str
    on_cpu: str | None = None  # None: fine on a CPU

    @property
    def mixed(self) -> bool:
        return self.parameters != self.products

    @property
    def loss_scaling(self) -> bool:
        """float16 products under float32 weights: small gradients underflow in float16
        unless the loss is scaled (torch's GradScaler, Keras' LossScaleOptimizer). bfloat16
        has float32's range, and a ``-true`` precision has no float32 weights to scale into."""
        return self.mixed and self.products == "float16"


PRECISIONS: dict[str, PrecisionMeaning] = {
    "32-true": PrecisionMeaning("float32", "float32"),
    "64-true": PrecisionMeaning("float64", "float64"),
    "bf16-mixed": PrecisionMeaning("float32", "bfloat16"),
    "16-mixed": PrecisionMeaning("float32", "float16", on_cpu="bf16-mixed"),
    "bf16-true": PrecisionMeaning("bfloat16", "bfloat16"),
    "16-true": PrecisionMeaning("float16", "float16", on_cpu="bf16-true"),
}

# Strategies that refuse the CPU, and what does the same job there.
STRATEGIES_ON_CPU = {"fsdp": "ddp"}


@dataclass(frozen=True)
class Capabilities:
    """One framework's reading of the recipe's precision and strategy words."""

    framework: str
    precisions: Mapping[str, str]  # recipe precision -> this framework's own setting
    strategies: tuple[str, ...]  # strategies in this framework's own words
    data_parallel: str  # several devices on one node
    multi_node: str  # several nodes
    refused: Mapping[str, str]  # strategy it cannot run -> why, and what would work

    def resolve_strategy(self, strategy: str, devices: int = 1, num_nodes: int = 1) -> str:
        """The strategy in this framework's own words. Every data-parallel word (``ddp``,
        ``mirrored``, ``multi_worker_mirrored``, or ``auto`` on several devices) means this
        framework's data parallelism: across nodes where there are several."""
        if strategy in self.refused:
            raise ValueError(self.refused[strategy])
        if strategy == "fsdp" or (strategy == "auto" and devices * num_nodes == 1):
            return strategy
        if num_nodes > 1 or strategy == "multi_worker_mirrored":
            return self.multi_node
        return self.data_parallel


LIGHTNING = Capabilities(
    framework="lightning",
    precisions={p: p for p in PRECISIONS},  # the recipe's words are Lightning's
    strategies=("auto", "ddp", "fsdp"),
    data_parallel="ddp",
    multi_node="ddp",
    refused={},
)
KERAS = Capabilities(
    framework="keras",
    precisions={
        "32-true": "float32",
        "64-true": "float64",
        "bf16-mixed": "mixed_bfloat16",
        "16-mixed": "mixed_float16",
        "bf16-true": "bfloat16",
        "16-true": "float16",
    },  # Keras dtype policies
    strategies=("auto", "mirrored", "multi_worker_mirrored"),
    data_parallel="mirrored",
    multi_node="multi_worker_mirrored",
    refused={
        "fsdp": "trainer.strategy 'fsdp' is Lightning's; Keras on TensorFlow has no sharded data "
        "parallelism: use 'mirrored', or trainer.framework 'lightning'"
    },
)
CAPABILITIES: dict[str, Capabilities] = {"lightning": LIGHTNING, "keras": KERAS}

# The Keras dtype policy of each precision word (zoo.keras.precision builds under it).
KERAS_POLICIES = KERAS.precisions


def cpu_problems(precision: str, strategy: str, why: str) -> list[str]:
    """What a trainer section asks that the CPU cannot do, each with what would work.
    ``why`` says how the CPU was chosen (the recipe's accelerator, or auto finding no GPU)."""
    problems = []
    better = PRECISIONS[precision].on_cpu
    if better is not None:
        problems.append(
            f"trainer.precision {precision!r} needs a GPU and the accelerator here is the CPU ({why}): "
            f"float16 kernels are ~100x slower on CPU, and Lightning would silently run bf16; "
            f"use {better!r}, or run on a GPU"
        )
    if strategy in STRATEGIES_ON_CPU:
        problems.append(
            f"trainer.strategy {strategy!r} needs GPUs (it refuses the CPU); use "
            f"{STRATEGIES_ON_CPU[strategy]!r} on CPU (the accelerator here is the CPU: {why})"
        )
    return problems
