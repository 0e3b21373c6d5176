"""The task's loss and one plain training step in each framework.

Written out by hand rather than through Lightning or ``fit``: the comparison must
exercise the twins, zoo's optimizers and the lr table, and nothing else (no callbacks,
loss scaling, metric updates or hidden casts). Both steps do the same things in the same
order: forward in train mode, cross-entropy over every label (classes, or every token of
a language model), gradients, one optimizer update at rate ``table[step]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.compare.twins import Twins, loss_dtype, torch_autocast


def torch_loss(logits, y, dtype: str):
    """Mean cross-entropy; ``(N, C)`` logits for classes, ``(N, T, V)`` for tokens."""
    import torch
    import torch.nn.functional as F

    flat = logits.reshape(-1, logits.shape[-1]).to(getattr(torch, dtype))
    return F.cross_entropy(flat, y.reshape(-1))


def keras_loss(logits, y, dtype: str):
    import tensorflow as tf

    logits = tf.cast(logits, dtype)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def dense_gradients(gradients: list[Any]) -> list[Any]:
    """Embedding gradients arrive as ``IndexedSlices``; the optimizers and the comparison
    want the dense tensor torch also has."""
    import tensorflow as tf

    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in gradients]


class TorchStep:
    """forward, loss, backward, ``optimizer.step``, ``scheduler.step``."""

    def __init__(self, model: Any, optimizer_cfg: Any, table: np.ndarray, precision: str):
        from zoo.lightning.optim import build_optimizer, build_scheduler

        cfg = optimizer_cfg
        self.model = model
        self.precision = precision
        self.optimizer = build_optimizer(cfg, self.model.parameters())
        self.scheduler = build_scheduler(self.optimizer, table, cfg.lr)

    def __call__(self, x, y):
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with torch_autocast(self.precision):
            logits = self.model(x)
        loss = torch_loss(logits, y, loss_dtype(self.precision))
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()


class KerasStep:
    """``tf.GradientTape`` and ``apply_gradients`` inside one ``tf.function``.

    The optimizer is built before the first call, so its variables are not created while
    tracing; ``reduce_retracing`` keeps an epoch's smaller last batch to one extra trace.
    """

    def __init__(self, model: Any, optimizer_cfg: Any, table: np.ndarray, precision: str):
        import tensorflow as tf

        from zoo.keras.optimizers import build_optimizer

        self.model = model
        self.dtype = loss_dtype(precision)
        self.optimizer = build_optimizer(optimizer_cfg, table)
        self.variables = list(self.model.trainable_variables)
        self.optimizer.build(self.variables)
        self.step = tf.function(self._step, reduce_retracing=True)

    def _step(self, x, y):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = keras_loss(logits, y, self.dtype)
        gradients = dense_gradients(tape.gradient(loss, self.variables))
        self.optimizer.apply_gradients(zip(gradients, self.variables, strict=True))
        return loss

    def __call__(self, x, y):
        return self.step(x, y)


def twin_steps(twins: Twins, table: np.ndarray) -> tuple[TorchStep, KerasStep]:
    """The training step of each twin, with the recipe's optimizer and precision."""
    optimizer, precision = twins.setup.recipe.optimizer, twins.setup.precision
    return (
        TorchStep(twins.torch_model, optimizer, table, precision),
        KerasStep(twins.keras_model, optimizer, table, precision),
    )
