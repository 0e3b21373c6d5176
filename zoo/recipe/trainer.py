"""The recipe's ``trainer`` section: the framework, how long and in what precision to train, on
what devices with what strategy, the seed. What needs the machine (a GPU for float16) is
checked when a run starts (``zoo.hardware``); here only what the recipe alone decides."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, PositiveInt, model_validator

from zoo.recipe.capabilities import (
    CAPABILITIES,
    Accelerator,
    Precision,
    Strategy,
    cpu_problems,
    normalize_framework,
)
from zoo.recipe.data import Section
from zoo.recipe.optimization import PositiveFloat

Framework = Annotated[Literal["lightning", "keras"], BeforeValidator(normalize_framework)]

SEED_LIMIT = 2**32  # numpy's and torch's seeds are unsigned 32-bit (torch also takes 64, numpy not)
# Both frameworks tabulate the whole run up front: one learning rate per optimizer step,
# and (Keras) every epoch's sample order, 8 bytes x samples x epochs. 10,000 epochs of
# 60,000 samples is 4.8 GB already; 1e9 would ask for terabytes before the first step.
MAX_EPOCHS = 10_000
DEFAULT_EPOCHS = 10  # max_epochs where a recipe sets neither it nor max_steps
MAX_STEPS = 10_000_000  # a float64 rate per step: 80 MB of table


class EarlyStoppingConfig(Section):
    """``trainer.early_stopping``: stop when the monitored metric stops improving, and export the
    best epoch's weights beside the last (zoo.early_stopping holds the rule both frameworks follow)."""

    monitor: str = Field(
        "val_loss",
        pattern=r"^(train|val)_[a-z0-9_]+$",
        description="A metrics.csv column of the run's epochs: val_loss, val_accuracy, val_bpc, "
        "train_loss...",
    )
    mode: Literal["auto", "min", "max"] = Field(
        "auto", description="min or max; auto: max for accuracies and F1, min for losses, bits, perplexity."
    )
    patience: PositiveInt | None = Field(
        3,
        description="Stop after this many epochs in a row without improvement; None: never stop, only "
        "export the best epoch.",
    )
    min_delta: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="An epoch improves only when it beats the best by more than this.",
    )


class TrainerConfig(Section):
    framework: Framework = Field(
        "lightning",
        description="lightning (PyTorch) or keras (TensorFlow); 'torch' means lightning.",
    )
    max_epochs: int | None = Field(
        None,
        gt=0,
        le=MAX_EPOCHS,
        description=f"Epochs to train (at most {MAX_EPOCHS:,}: both frameworks tabulate the learning "
        "rate of every step, and Keras every epoch's sample order, before the first step). None: "
        f"{DEFAULT_EPOCHS}, or as many as max_steps needs when that is set.",
    )
    max_steps: int | None = Field(
        None,
        gt=0,
        le=MAX_STEPS,
        description="Optimizer steps to train (with accumulate_grad_batches, one step is that many "
        "batches); with max_epochs too, the run stops at whichever comes first, as Lightning's "
        "Trainer does. The learning-rate schedule spans the steps the run will take.",
    )
    label_smoothing: float = Field(
        0.0,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Label smoothing s of every task's cross-entropy loss (classification, language "
        "models, token labels), as torch's cross_entropy(label_smoothing=s): the target is 1 - s on "
        "the label plus s / classes on every class; labels that count in no loss stay uncounted, and "
        "bits per character/token stay the plain cross-entropy's. The same formula in Keras.",
    )
    early_stopping: EarlyStoppingConfig | None = Field(
        None,
        description="Stop when a monitored epoch metric stops improving, and export the best epoch's "
        "weights as model.best.safetensors beside the last (monitor, mode, patience, min_delta).",
    )
    metrics: list[str] = Field(
        [],
        description="Epoch metrics besides the task's own (loss, accuracy or bits): topK_accuracy "
        "(top5_accuracy...) and macro_f1 for classification, perplexity for language models; in "
        "metrics.csv, the progress lines, TensorBoard, summary.json and zoo evaluate, in both frameworks.",
    )
    precision: Precision = Field(
        "32-true",
        description="Lightning's precision words; on Keras the matching dtype policy "
        "(float32, float64, mixed_bfloat16, mixed_float16, bfloat16, float16).",
    )
    accelerator: Accelerator = Field(
        "auto", description="auto takes the GPU where there is one; gpu fails at start where there is none."
    )
    devices: PositiveInt = Field(1, description="Devices per node; more than one trains data-parallel.")
    num_nodes: PositiveInt = Field(
        1, description="Machines (Lightning under torchrun/SLURM; Keras via TF_CONFIG)."
    )
    strategy: Strategy = Field(
        "auto",
        description="ddp / fsdp (Lightning), mirrored / multi_worker_mirrored (Keras); a data-parallel "
        "strategy written for one framework runs data-parallel in the other.",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations block by block in the backward pass (less memory, more time).",
    )
    accumulate_grad_batches: PositiveInt = Field(
        1, description="Average the gradients of this many batches per optimizer step."
    )
    gradient_clip_norm: PositiveFloat | None = Field(
        None,
        description="Scale the (accumulated) gradients so their global L2 norm is at most this, "
        "as torch's clip_grad_norm_ (Lightning's gradient_clip_val) does; the same rule in Keras.",
    )
    compile: bool = Field(False, description="torch.compile (inductor) / Keras jit_compile (XLA).")
    seed: int = Field(
        0,
        ge=0,
        lt=SEED_LIMIT,
        description="Seeds weights init, batch order and dropout; 0 <= seed < 2**32 (numpy's range).",
    )
    deterministic: bool = Field(False, description="Ask both frameworks for deterministic kernels.")
    num_threads: PositiveInt | None = Field(
        None,
        description="CPU threads for the framework's kernels; None: the CPUs free when the run starts "
        "(this process's CPUs less the 1-minute load average, at least 1; $ZOO_NUM_THREADS instead when "
        "set), recorded in the run's states so that a resume keeps it.",
    )
    progress_bar: bool = Field(True, description="Show the framework's progress bar.")

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes

    @model_validator(mode="after")
    def _combinations(self):
        """What the recipe alone decides. Where it leaves the device to ``auto``, the same
        rules are checked against the machine when a run starts (``zoo.hardware``)."""
        refused = CAPABILITIES[self.framework].refused
        if self.strategy in refused:
            raise ValueError(refused[self.strategy])
        if self.accelerator == "cpu":
            problems = cpu_problems(self.precision, self.strategy, "trainer.accelerator is 'cpu'")
            if problems:
                raise ValueError(problems[0])
        return self

    def resolved_strategy(self) -> str:
        """The strategy in this framework's own words: data-parallel strategies carry over."""
        return CAPABILITIES[self.framework].resolve_strategy(self.strategy, self.devices, self.num_nodes)
