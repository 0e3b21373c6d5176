"""The Keras step kit: one training step as zoo takes it, made from a :class:`~zoo.backend.StepPlan`.

This is the one public door to a Keras training step. ``zoo train``'s loop
(:func:`zoo.keras.trainer.fit`) and ``zoo compare`` (zoo.compare.steps) both take the compiled
model, its optimizer and the seeded tf.data stream from here, so what compare checks is what a
run trains: the fine-tuning start, the optimizer (head rates, decay exemptions, clipping,
accumulation, loss scaling) and the task's loss and metric.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zoo.checkpoint.tables import decay_exempt_variables, keras_layer
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.data import DataError
from zoo.finetune import merged_tensors
from zoo.keras.data import train_dataset
from zoo.keras.onednn import onednn_words
from zoo.lora import attach, hold_quantized_base
from zoo.metrics_file import MACRO_F1, PERPLEXITY, top_k
from zoo.precision import PRECISIONS

if TYPE_CHECKING:
    from zoo.backend import StepPlan
    from zoo.data import Dataset

__all__ = [
    "KerasSteps",
    "compile_for",
    "exempt_paths",
    "for_batches",
    "initialise",
    "loss_scaled",
    "onednn_words",
    "train_stream",
]  # fmt: skip


@dataclass(frozen=True)
class KerasSteps:
    """A Keras training step: the model that takes the batches (the twin, or the twin behind
    :class:`~zoo.keras.losses.TextInputs`) compiled with the task's loss and metric, and the
    optimizer zoo counts steps with and saves (the inner one, under loss scaling)."""

    model: Any
    optimizer: Any

    @classmethod
    def compiled(
        cls, plan: StepPlan, model, table, *, accumulate: int | None = None, jit_compile: bool | None = None
    ) -> KerasSteps:
        """``model`` (the twin) compiled as ``fit`` trains it: the plan's fine-tuning start
        loaded, LoRA adapters attached, the optimizer built. ``accumulate`` and ``jit_compile``
        None follow the recipe; ``zoo compare`` passes 1 and False (an update per batch, no XLA)."""
        from zoo.keras.optimizers import build_optimizer

        recipe, family, dataset = plan.recipe, plan.family, plan.dataset
        trainer_cfg = recipe.trainer
        head_rates = initialise(model, family, plan.init)
        if recipe.init.lora is not None:  # adapters on the frozen base: they (and biases asked for) train
            attach(model, family, model.zoo_config, recipe.init.lora, trainer_cfg.seed)
            hold_quantized_base(model, plan.init)  # QLoRA: a quantized base stays integers
        multipliers = {path: rate / recipe.optimizer.lr for path, rate in head_rates.items()}
        optimizer = build_optimizer(
            recipe.optimizer,
            table,
            accumulate=trainer_cfg.accumulate_grad_batches if accumulate is None else accumulate,
            lr_multipliers=multipliers,
            decay_exempt=None if recipe.optimizer.decay_biases_and_norms else exempt_paths(model, family),
            clip_norm=trainer_cfg.gradient_clip_norm,
            # On every worker alike (see Float32State); the TensorBoard step scalars read it.
            grad_norm_every=recipe.tracking.log_every_n_steps if recipe.tracking.tensorboard else None,
        )
        model = for_batches(model, dataset)
        jit_compile = trainer_cfg.compile if jit_compile is None else jit_compile
        scaled = loss_scaled(optimizer, trainer_cfg.precision)
        compile_for(
            model, dataset.task, scaled, jit_compile, dataset.metrics[0], trainer_cfg.label_smoothing,
            tuple(trainer_cfg.metrics),
        )  # fmt: skip
        return cls(model, optimizer)


def train_stream(plan: StepPlan, epochs: int, **position: Any):
    """The plan's training batches as zoo's tf.data stream, in the seeded order, for ``epochs``
    epochs (``position``: ``start_epoch``, ``skip``, ``share`` of zoo.keras.data.train_dataset)."""
    recipe = plan.recipe
    return train_dataset(
        plan.dataset.train, plan.batch_size, recipe.trainer.seed, recipe.data.shuffle, epochs,
        plan.family.input_kind, **position,
    )  # fmt: skip


def compile_for(
    model, task: str, optimizer, jit_compile: bool = False, metric: str | None = None, smoothing: float = 0.0,
    extra: tuple[str, ...] = (),
) -> None:  # fmt: skip
    """Loss and metrics per task, the same quantities the Lightning tasks log, under the same
    names (``metric``: the data's, :attr:`zoo.data.Dataset.metrics`). Token tasks skip
    ``IGNORE_INDEX`` labels (padding, unmasked positions); ``smoothing``: the recipe's
    ``trainer.label_smoothing`` (in the loss only: bits per token stay the plain cross-entropy's);
    ``extra``: ``trainer.metrics`` (:func:`extra_measures`)."""
    import keras

    from zoo.keras.losses import SmoothedCrossEntropy, TokenAccuracy, TokenBits, TokenCrossEntropy

    if task == "classification":
        loss = (
            SmoothedCrossEntropy(smoothing)
            if smoothing
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        measure = keras.metrics.SparseCategoricalAccuracy(name=metric or "accuracy")
    elif task == "language_modeling":
        loss, measure = TokenCrossEntropy(smoothing=smoothing), TokenBits(name=metric or "bpc")
    else:  # token_classification, masked_language_modeling
        loss, measure = TokenCrossEntropy(smoothing=smoothing), TokenAccuracy(name=metric or "accuracy")
    measures = [measure, *(extra_measures(extra, model.zoo_config) if extra else ())]
    model.compile(optimizer=optimizer, loss=loss, metrics=measures, jit_compile=jit_compile)


def extra_measures(names, config) -> list:
    """trainer.metrics as Keras metrics under their zoo names: Keras' top-k accuracy, zoo's macro
    F1 (zoo.keras.metrics.MacroF1) over the model's classes and perplexity."""
    import keras

    from zoo.keras.losses import Perplexity
    from zoo.keras.metrics import MacroF1

    measures = []
    for name in names:
        if (k := top_k(name)) is not None:
            measures.append(keras.metrics.SparseTopKCategoricalAccuracy(k=k, name=name))
        elif name == MACRO_F1:
            measures.append(MacroF1(config.num_classes, name=name))
        elif name == PERPLEXITY:
            measures.append(Perplexity(name=name))
    return measures


def for_batches(model, dataset: Dataset):
    """The model ``fit`` and ``evaluate`` call: the twin, or for padded text the twin behind
    :class:`~zoo.keras.losses.TextInputs` (the batches are dicts of ids, mask, token types)."""
    from zoo.keras.losses import TextInputs

    split = dataset.train if len(dataset.train) else dataset.test
    if not split.has_text_inputs:
        return model
    pairs = split.token_types is not None or getattr(split.x, "pairs", False)
    if pairs and "token_type_ids" not in inspect.signature(model.call).parameters:
        raise DataError(
            f"{type(model).__name__} takes no token_type_ids; sentence pairs need a family whose "
            "twin takes token types"
        )
    return TextInputs(model)


def initialise(model, family, init) -> dict[str, float]:
    """Load a fine-tuning start into ``model``, freeze the backbone if asked; return the
    learning-rate multipliers of the head's variables (by variable path)."""
    if init is None:
        return {}
    load_tensors(model, merged_tensors(init, model_tensors(model)))
    multipliers = {}
    for port in family.weight_table(model.zoo_config):
        layer = keras_layer(model, port.layer)
        in_head = any(spec.name in init.head for spec in port.tensors)
        if not in_head and init.freeze_backbone:
            layer.trainable = False  # a frozen BatchNorm also normalises with its running statistics
        for name in port.variables:
            variable = keras_layer(layer, name)
            if in_head and init.head_lr:
                multipliers[variable.path] = init.head_lr
    return multipliers


def exempt_paths(model, family) -> set[str]:
    """Paths of the Keras variables weight decay leaves alone
    (zoo.checkpoint.tables.decay_exempt_variables)."""
    table = family.weight_table(model.zoo_config)
    exempt = decay_exempt_variables(table)
    return {keras_layer(keras_layer(model, layer), name).path for layer, name in exempt}


def loss_scaled(optimizer, precision: str):
    """``optimizer`` behind Keras' LossScaleOptimizer where the precision needs loss scaling,
    as Lightning's 16-mixed puts a GradScaler in. Keras' ``compile`` adds one only to a model
    whose own policy is ``mixed_float16``, and a zoo twin is built under float32 with only
    its product layers mixed (``zoo.nn.keras.precision``): without this, 16-mixed trained
    unscaled. The optimizer zoo counts steps with and saves is the inner one
    (``zoo.keras.callbacks.training_optimizer``)."""
    import keras

    if not PRECISIONS[precision].loss_scaling:
        return optimizer
    return keras.optimizers.LossScaleOptimizer(optimizer)
