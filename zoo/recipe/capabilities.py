"""What the recipe's words mean in each framework: one table per framework.

A recipe names precisions and strategies in one vocabulary (Lightning's precision words;
each framework's own strategy names). Each framework's :class:`Capabilities` says what
those words become there (a precision's, as ``zoo.precision``'s one table says), which
strategies it runs itself, and what a data-parallel strategy written for the other
framework turns into. The schema refuses what a table
refuses; the backends read their setting from here. Nothing here looks at the machine:
what needs a GPU is stated here and checked when a run starts (``zoo.hardware``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# The precision table is zoo.precision's; the recipe package names it here too.
from zoo.precision import PRECISIONS as PRECISIONS
from zoo.precision import Precision as Precision
from zoo.precision import PrecisionMeaning as PrecisionMeaning

FRAMEWORKS = ("lightning", "keras")
FRAMEWORK_ALIASES = {"torch": "lightning", "pytorch": "lightning", "tensorflow": "keras"}

Strategy = Literal["auto", "ddp", "fsdp", "mirrored", "multi_worker_mirrored"]
Accelerator = Literal["auto", "cpu", "gpu"]


def normalize_framework(value: Any) -> Any:
    """``"torch"`` is accepted wherever a framework is named; it means ``"lightning"``."""
    return FRAMEWORK_ALIASES.get(value, value) if isinstance(value, str) else value


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
    precisions={word: p.lightning for word, p in PRECISIONS.items()},  # the recipe's words are Lightning's
    strategies=("auto", "ddp", "fsdp"),
    data_parallel="ddp",
    multi_node="ddp",
    refused={},
)
KERAS = Capabilities(
    framework="keras",
    precisions={word: p.keras_policy for word, p in PRECISIONS.items()},  # Keras dtype policies
    strategies=("auto", "mirrored", "multi_worker_mirrored"),
    data_parallel="mirrored",
    multi_node="multi_worker_mirrored",
    refused={
        "fsdp": "trainer.strategy 'fsdp' is Lightning's; Keras on TensorFlow has no sharded data "
        "parallelism: use 'mirrored', or trainer.framework 'lightning'"
    },
)
CAPABILITIES: dict[str, Capabilities] = {"lightning": LIGHTNING, "keras": KERAS}

# The Keras dtype policy of each precision word (zoo.nn.keras.precision builds under it).
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
