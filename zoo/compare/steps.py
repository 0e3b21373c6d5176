"""Each twin's training step, as zoo's own trainers take it.

A compare report is worth what it exercises: with loops of its own, a wrong loss in the
Lightning task or the Keras trainer, optimizer wiring (parameter groups, decay exemptions,
clipping) or a data pipeline that feeds the twins differently could never show. So both
sides are built by the trainers' own functions, and the loss is the trainers' (defined
once per framework, in zoo.lightning.task and zoo.keras.steps / zoo.keras.losses). Each
framework's step comes through its public step kit, made from a :class:`~zoo.backend.StepPlan`,
the one ``zoo train`` steps too:

- torch: the LightningModule ``zoo train`` fits (:class:`zoo.lightning.steps.LightningSteps`),
  with the optimizer and scheduler of its ``configure_optimizers``. The training section
  runs it in Lightning's own Trainer (its precision plugin, clipping, step order) with the
  step options ``fit`` passes, on zoo's DataLoader.
- keras: the twin compiled as ``fit`` compiles it (:class:`zoo.keras.steps.KerasSteps`):
  the same loss object, metric and optimizer; a training step is ``train_on_batch`` on a
  batch of zoo's tf.data stream, a timed step the compiled model's ``train_step``.

What a compare must see differently is switched off with the trainers' own switches: no
callbacks, logger, progress bar or checkpointing, no torch.compile or XLA, no gradient
accumulation (compare updates after every batch), one CPU device. A pass without an update
(the forward and gradient sections, re-synchronisation) computes the same loss: the task's
``loss_and_metrics`` in Lightning's precision context, and the compiled model's ``compute_loss``.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from zoo.backend import StepPlan
from zoo.compare.twins import Setup, Twins, exact_array
from zoo.data import steps_per_epoch


@dataclass(frozen=True)
class Batch:
    """One training batch as each pipeline yields it: zoo's DataLoader (``(x, y)``, or
    ``(ids, padding_mask, token_types, y)`` for padded text) and zoo's tf.data stream
    (``(x, y)``, x a dict of ids, mask and token types for padded text)."""

    torch: tuple
    keras: tuple

    @property
    def size(self) -> int:
        return len(self.torch[-1])


def step_plan(setup: Setup, config=None) -> StepPlan:
    """What the step kits build both twins' steps from: the recipe, its data and ``config``
    (default: the recipe's; the parity pair passes its own). No fine-tuning start: the twins
    already hold its tensors (zoo.compare.twins.build_twins)."""
    return StepPlan(setup.recipe, setup.family, setup.config if config is None else config, setup.dataset)


def torch_loader(setup: Setup):
    """The training DataLoader ``zoo train`` gives Lightning (seeded order, whole batches)."""
    from zoo.lightning.steps import train_loader

    return train_loader(step_plan(setup))


def training_batches(setup: Setup, count: int) -> list[Batch]:
    """The first ``count`` training batches of the seeded order, epoch after epoch, from both
    trainers' pipelines (masked-LM masks, augmentation and padding included)."""
    from zoo.keras.steps import train_stream

    split = setup.dataset.train
    epochs = math.ceil(count / steps_per_epoch(len(split), setup.batch_size))
    data = torch_loader(setup)
    torch_side: list[tuple] = []
    for epoch in range(epochs):
        data.sampler.set_epoch(epoch)  # as Lightning does at each epoch's start
        torch_side += [tuple(batch) for batch in data]
    stream = train_stream(step_plan(setup), epochs)
    keras_side = [tuple(batch) for batch in stream.take(count)]
    return [Batch(t, k) for t, k in zip(torch_side[:count], keras_side, strict=True)]


# -------------------------------------------------------------------------------- torch


def lightning_task(twins: Twins, table: np.ndarray):
    """A fresh LightningModule around the torch twin, exactly as ``zoo train`` builds it."""
    from zoo.lightning.steps import build_task

    return build_task(step_plan(twins.setup, twins.config), twins.torch_model, table, compiled=False)


@functools.cache
def precision_plugin(precision: str):
    """Lightning's own precision plugin for ``precision`` on the CPU: its forward context
    (autocast, float64 defaults) and its input conversion, for passes outside a Trainer."""
    from zoo.lightning.steps import cpu_trainer

    return cpu_trainer(precision).precision_plugin


def lightning_losses(twins: Twins, table: np.ndarray, steps: int, watch: Watcher | None = None) -> np.ndarray:
    """``steps`` optimizer steps of the torch twin in Lightning's Trainer, as ``zoo train``
    runs them on one CPU; the loss of every step (before its update). ``watch`` sees the
    optimizer before each step and the loss after it."""
    import lightning as L

    from zoo.lightning.steps import LightningSteps, cpu_trainer

    class Steps(L.Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            if watch is not None:
                watch.before(len(self.losses) + 1, trainer.optimizers[0])

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            self.losses.append(float(outputs["loss"]))
            if watch is not None:
                watch.after(len(self.losses), self.losses[-1])

    recorder = Steps()
    plan = step_plan(twins.setup, twins.config)
    # In the pair's precision: the reference pair runs in its own.
    kit = LightningSteps.for_compare(plan, twins.torch_model, table, twins.precision)
    trainer = cpu_trainer(
        max_epochs=-1, max_steps=steps, limit_val_batches=0, callbacks=[recorder], **kit.options
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*`validation_step` but have no `val_dataloader`.*")
        warnings.filterwarnings("ignore", ".*`isinstance\\(treespec, LeafSpec\\)` is deprecated.*")
        trainer.fit(kit.task, kit.loader)
    return np.array(recorder.losses)


def torch_pass(task, batch: tuple, precision: str) -> dict[str, Any]:
    """Eval-mode outputs, then train-mode outputs, the task's loss and a copy of every
    parameter's gradient. The parameters' own gradients are dropped: an update is fed its
    gradients explicitly (:class:`zoo.compare.transfer.Updater`), and left on a float64
    reference twin they would be a model's worth of memory through the Keras pass."""
    import torch

    plugin = precision_plugin(precision)
    batch = plugin.convert_input(batch)
    *inputs, _ = batch
    task.eval()
    with torch.no_grad(), plugin.forward_context():
        evaluated = task(*inputs).double().numpy()
    task.train()
    task.zero_grad(set_to_none=True)
    outputs: list[Any] = []  # the twin's output inside loss_and_metrics
    hook = task.model.register_forward_hook(lambda module, args, output: outputs.append(output))
    try:
        with plugin.forward_context():
            loss = task.loss_and_metrics(batch)[0]
    finally:
        hook.remove()
    loss.backward()
    gradients = {
        name: (np.zeros(p.shape, _numpy_dtype(p)) if p.grad is None else exact_array(p.grad))
        for name, p in task.model.named_parameters()
        if p.requires_grad  # frozen tensors (a LoRA base) have none, as in the Keras twin
    }
    task.zero_grad(set_to_none=True)
    return {
        "eval": evaluated,
        "train": outputs[-1].detach().double().numpy(),
        "loss": float(loss.detach()),
        "gradients": gradients,
    }


def _numpy_dtype(tensor) -> type:
    """float64 for float64 tensors; float32, which holds bf16 and float16 values exactly, else."""
    import torch

    return np.float64 if tensor.dtype == torch.float64 else np.float32


class TorchStep:
    """One step of the Lightning task without a Trainer (timing): ``loss_and_metrics`` in
    Lightning's precision context, backward, the optimizer and scheduler of
    ``configure_optimizers``."""

    def __init__(self, twins: Twins, table: np.ndarray):
        self.task = lightning_task(twins, table)
        configured = self.task.configure_optimizers()
        self.optimizer, self.scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
        self.plugin = precision_plugin(twins.precision)

    def __call__(self, batch: tuple):
        self.task.train()
        self.optimizer.zero_grad(set_to_none=True)
        with self.plugin.forward_context():
            loss = self.task.loss_and_metrics(batch)[0]
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()

    def batch(self, batch: Batch) -> tuple:
        return self.plugin.convert_input(batch.torch)


# -------------------------------------------------------------------------------- keras


def keras_compiled(twins: Twins, table: np.ndarray) -> tuple[Any, Any]:
    """The model that takes the batches (the twin, or the twin behind ``TextInputs``) compiled
    as ``zoo train`` compiles it, with a fresh optimizer; and that optimizer."""
    from zoo.keras.steps import KerasSteps

    plan = step_plan(twins.setup, twins.config)
    kit = KerasSteps.compiled(plan, twins.keras_model, table, accumulate=1, jit_compile=False)
    return kit.model, kit.optimizer


def keras_losses(twins: Twins, table: np.ndarray, batches: list[Batch]) -> np.ndarray:
    """One ``train_on_batch`` per batch (metrics reset by each call, so its loss is the
    batch's); the loss of every step, before its update. The optimizer's slots are built first,
    eagerly: built inside the first traced step, they make TensorFlow trace it twice."""
    model, _ = keras_compiled(twins, table)
    model.optimizer.build(model.trainable_variables)  # the loss-scaled wrapper too, under 16-mixed
    return np.array([float(model.train_on_batch(*b.keras, return_dict=True)["loss"]) for b in batches])


def keras_pass(model, batch: tuple) -> tuple[dict[str, Any], Any, Any]:
    """Eval- and train-mode outputs and the compiled loss; returns the pass, the tape and
    the loss (the gradients are mapped by the caller, through the weight table)."""
    import tensorflow as tf

    x, y = batch
    evaluated = np.asarray(model(x, training=False)).astype(np.float64)
    with tf.GradientTape() as tape:
        trained = model(x, training=True)
        loss = model.compute_loss(x=x, y=y, y_pred=trained, training=True)
    found = {"eval": evaluated, "train": np.asarray(trained).astype(np.float64), "loss": float(loss)}
    return found, tape, loss


class KerasStep:
    """The compiled model's ``train_step`` (what ``fit`` runs per batch) in one ``tf.function``;
    ``reduce_retracing`` keeps an epoch's smaller last batch to one extra trace."""

    def __init__(self, twins: Twins, table: np.ndarray):
        import tensorflow as tf

        self.model, self.optimizer = keras_compiled(twins, table)
        self.optimizer.build(self.model.trainable_variables)  # not while tracing
        self.step = tf.function(lambda x, y: self.model.train_step((x, y))["loss"], reduce_retracing=True)

    def __call__(self, x, y):
        return self.step(x, y)


def dense_gradients(gradients: list[Any]) -> list[Any]:
    """Embedding gradients arrive as ``IndexedSlices``; the comparison wants the dense
    tensor torch also has."""
    import tensorflow as tf

    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in gradients]


class Watcher(Protocol):
    """What the torch run tells the training section: the optimizer before each step and
    the step's loss after it."""

    def before(self, step: int, optimizer: Any) -> None: ...

    def after(self, step: int, loss: float) -> None: ...
