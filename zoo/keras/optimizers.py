"""Keras optimizers with torch's update rules, so one recipe means one algorithm.

Keras' own SGD folds the learning rate into its momentum buffer, its Adam puts epsilon
inside the bias correction, and its ``weight_decay`` is always decoupled. torch's SGD and
Adam add an L2 term to the gradient instead. These classes do exactly what
``torch.optim`` does; AdamW is decoupled in both and uses Keras' own decay.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


class TableSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The rate of update ``step`` is ``table[step]`` (zoo.schedule builds the table)."""

    def __init__(self, table):
        self.values = [float(v) for v in np.asarray(table, dtype=np.float32)]
        self.table = ops.convert_to_tensor(np.asarray(self.values, dtype=np.float32))

    def __call__(self, step):
        index = ops.minimum(ops.cast(step, "int32"), len(self.values) - 1)
        return ops.take(self.table, index)

    def get_config(self):
        return {"table": self.values}


LOW_PRECISION = ("bfloat16", "float16")


def state_dtype(variable) -> str:
    """Optimizer state and update arithmetic stay in float32 for bf16/fp16 weights:
    in bfloat16, Adam's beta_2 = 0.999 rounds to 1.0 and the update becomes 0/0."""
    return "float32" if variable.dtype in LOW_PRECISION else variable.dtype


class Float32State(keras.optimizers.Optimizer):
    """Creates slots in :func:`state_dtype` and writes updates back in the weight's dtype.

    ``lr_multipliers`` (variable path -> factor) give some variables their own rate, as
    torch's parameter groups do (a fine-tuned head's ``init.head_lr``).
    """

    def __init__(self, *args, lr_multipliers: dict[str, float] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_multipliers = dict(lr_multipliers or {})

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        # By index: inside a traced step the variable handed to update_step may be the
        # backend's own variable, which has no Keras path.
        self._multipliers = [self.lr_multipliers.get(v.path, 1.0) for v in var_list]

    def rate(self, learning_rate, variable):
        lr = ops.cast(learning_rate, state_dtype(variable))
        return lr * self._multipliers[self._get_variable_index(variable)]

    def state_variables(self, var_list, name: str):
        return [
            self.add_variable(
                shape=v.shape,
                dtype=state_dtype(v),
                initializer="zeros",
                name=f"{name}_{i}",
                aggregation="none",
            )
            for i, v in enumerate(var_list)
        ]

    def set_weight(self, variable, value) -> None:
        self.assign(variable, ops.cast(value, variable.dtype))


class TorchSGD(Float32State):
    def __init__(self, learning_rate, momentum=0.0, nesterov=False, l2=0.0, name="torch_sgd", **kw):
        super().__init__(learning_rate=learning_rate, name=name, **kw)
        self.momentum, self.nesterov, self.l2 = momentum, nesterov, l2

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        if self.momentum:
            self._buffers = self.state_variables(var_list, "momentum_buffer")

    def update_step(self, gradient, variable, learning_rate):
        dtype = state_dtype(variable)
        lr = self.rate(learning_rate, variable)
        g = ops.cast(gradient, dtype)
        weight = ops.cast(variable, dtype)
        if self.l2:
            g = g + self.l2 * weight
        if self.momentum:
            buffer = self._buffers[self._get_variable_index(variable)]
            self.assign(buffer, buffer * self.momentum + g)
            g = g + self.momentum * buffer if self.nesterov else buffer
        self.set_weight(variable, weight - lr * g)

    def get_config(self):
        return {
            **super().get_config(),
            "momentum": self.momentum,
            "nesterov": self.nesterov,
            "l2": self.l2,
        }


class TorchAdam(Float32State):
    """Adam with torch's arithmetic: ``p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)``.

    ``l2`` is torch.optim.Adam's weight decay (added to the gradient); the base class'
    ``weight_decay`` is the decoupled decay of AdamW.
    """

    def __init__(
        self, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-8, l2=0.0, name="torch_adam", **kw
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kw)
        self.beta_1, self.beta_2, self.epsilon, self.l2 = beta_1, beta_2, epsilon, l2

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m = self.state_variables(var_list, "exp_avg")
        self._v = self.state_variables(var_list, "exp_avg_sq")

    def update_step(self, gradient, variable, learning_rate):
        dtype = state_dtype(variable)
        lr = self.rate(learning_rate, variable)
        g = ops.cast(gradient, dtype)
        weight = ops.cast(variable, dtype)
        if self.l2:
            g = g + self.l2 * weight
        step = ops.cast(self.iterations + 1, dtype)
        b1, b2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
        m = self._m[self._get_variable_index(variable)]
        v = self._v[self._get_variable_index(variable)]
        self.assign(m, m * b1 + g * (1 - b1))
        self.assign(v, v * b2 + ops.square(g) * (1 - b2))
        bias1 = 1 - ops.power(b1, step)
        bias2 = 1 - ops.power(b2, step)
        denominator = ops.sqrt(v) / ops.sqrt(bias2) + self.epsilon
        self.set_weight(variable, weight - (lr / bias1) * m / denominator)

    def get_config(self):
        return {
            **super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
            "epsilon": self.epsilon, "l2": self.l2,
        }  # fmt: skip


def build_optimizer(
    cfg, table, accumulate: int = 1, lr_multipliers: dict[str, float] | None = None
) -> keras.optimizers.Optimizer:
    """``table`` holds one rate per optimizer step. With gradient accumulation Keras reads
    the schedule at its micro-step counter, so each rate is repeated ``accumulate`` times."""
    schedule = TableSchedule(np.repeat(np.asarray(table), accumulate))
    common = {
        "gradient_accumulation_steps": accumulate if accumulate > 1 else None,
        "lr_multipliers": lr_multipliers,
    }
    if cfg.name == "sgd":
        return TorchSGD(schedule, cfg.momentum, cfg.nesterov, cfg.weight_decay, **common)
    beta_1, beta_2 = cfg.betas
    if cfg.name == "adam":
        return TorchAdam(schedule, beta_1, beta_2, cfg.eps, l2=cfg.weight_decay, **common)
    decay = cfg.weight_decay or None
    return TorchAdam(schedule, beta_1, beta_2, cfg.eps, weight_decay=decay, name="torch_adamw", **common)
