"""Keras optimizers with torch's update rules, so one recipe means one algorithm.

Keras' own SGD folds the learning rate into its momentum buffer, its Adam puts epsilon
inside the bias correction, and its ``weight_decay`` is always decoupled. torch's SGD and
Adam add an L2 term to the gradient instead. These classes do exactly what
``torch.optim`` does, scalars in float64 as torch's Python doubles are.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


class TableSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The rate of update ``step`` is ``table[step]`` (zoo.schedule builds the table)."""

    def __init__(self, table):
        # float64, as torch's rates are: a float32 rate is a few ulps off at every step. An
        # array, not a list of Python floats (32 bytes a step, 90 MB for 3 million steps).
        self.values = np.asarray(table, dtype=np.float64)
        self.table = ops.convert_to_tensor(self.values)

    def __call__(self, step):
        index = ops.minimum(ops.cast(step, "int32"), len(self.values) - 1)
        return ops.take(self.table, index)

    def get_config(self):
        return {"table": self.values.tolist()}


LOW_PRECISION = ("bfloat16", "float16")
PER_UPDATE_KEPT = 8  # updates whose shared scalars are kept at once (one per replica of a step)


def state_dtype(variable) -> str:
    """Optimizer state and update arithmetic stay in float32 for bf16/fp16 weights:
    in bfloat16, Adam's beta_2 = 0.999 rounds to 1.0 and the update becomes 0/0."""
    return "float32" if variable.dtype in LOW_PRECISION else variable.dtype


class Float32State(keras.optimizers.Optimizer):
    """Creates slots in :func:`state_dtype` and writes updates back in the weight's dtype.

    ``lr_multipliers`` (variable path -> factor) give some variables their own rate, as
    torch's parameter groups do (a fine-tuned head's ``init.head_lr``); ``decay_exempt``
    (variable paths) get no weight decay, as a torch group with ``weight_decay=0``.
    ``clip_norm`` scales the gradients to that global L2 norm with torch's own formula
    (``clip_grad_norm_``: ``max_norm / (norm + 1e-6)``, capped at 1), which Keras'
    ``global_clipnorm`` lacks the 1e-6 of.
    """

    def __init__(
        self,
        *args,
        lr_multipliers: dict[str, float] | None = None,
        decay_exempt: set[str] | None = None,
        clip_norm: float | None = None,
        grad_norm_every: int | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.lr_multipliers = dict(lr_multipliers or {})
        self.decay_exempt = set(decay_exempt or ())
        self.clip_norm = clip_norm
        # Every N optimizer steps the global gradient norm (before clipping) is kept in
        # ``grad_norm`` for the tracking callbacks. It is part of the optimizer, built by every
        # worker of a multi-worker job alike: a step that only the chief altered would run other
        # collectives than the other workers' and stall them.
        self.grad_norm_every = grad_norm_every
        self.grad_norm = None

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        # By index: inside a traced step the variable handed to update_step may be the
        # backend's own variable, which has no Keras path.
        self._multipliers = [self.lr_multipliers.get(v.path, 1.0) for v in var_list]
        self._decays = [v.path not in self.decay_exempt for v in var_list]
        if self.grad_norm_every:
            self.grad_norm = self.add_variable(
                shape=(),
                initializer="zeros",
                dtype="float32",
                aggregation="only_first_replica",
                name="grad_norm",
            )

    def decays(self, variable) -> bool:
        return self._decays[self._get_variable_index(variable)]

    def _clip_gradients(self, grads):
        """Keras calls this on the (accumulated) gradients right before the update."""
        if self.grad_norm is not None:
            upcoming = (ops.convert_to_tensor(self._iterations) + 1) // (
                self.gradient_accumulation_steps or 1
            )
            logged = ops.equal(ops.mod(upcoming, self.grad_norm_every), 0)
            kept = self.grad_norm
            self.grad_norm.assign(
                ops.cond(logged, lambda: global_norm(grads), lambda: ops.convert_to_tensor(kept))
            )
        if not self.clip_norm:
            return grads
        dense = [None if g is None else self.dense(g, "float32") for g in grads]
        total = global_norm(dense)
        scale = ops.minimum(self.clip_norm / (total + 1e-6), 1.0)
        return [
            None if g is None else ops.cast(d * scale, g.dtype) for g, d in zip(grads, dense, strict=True)
        ]

    def shared(self, learning_rate, key, make):
        """A value every variable of one update shares (the rate in float64, a step size, a
        constant in a dtype), made once per update as torch makes its scalars once per step
        in Python. In a traced step each is an op, and made per variable they were two thirds
        of the optimizer's graph and most of the time Keras takes to trace a step (convnext-
        micro: 2,319 ops, 1.0 s of its 1.6 s first-step trace). An update is known by its
        ``learning_rate`` tensor, which the schedule makes anew for each (on each replica); a
        constant rate, one variable for every update, shares nothing."""
        if isinstance(learning_rate, keras.Variable):
            return make()
        updates = self.__dict__.setdefault("_per_update", [])
        values = next((found for rate, found in updates if rate is learning_rate), None)
        if values is None:  # a new update: keep the last few (one per replica), by reference
            values = {}
            updates[:] = [*updates[-(PER_UPDATE_KEPT - 1) :], (learning_rate, values)]
        if key not in values:
            values[key] = make()
        return values[key]

    def constant(self, learning_rate, value: float, dtype: str):
        """``value`` as a ``dtype`` tensor: what a Python float becomes in arithmetic with one."""
        return self.shared(
            learning_rate, ("constant", value, dtype), lambda: ops.convert_to_tensor(value, dtype)
        )

    def rate(self, learning_rate, variable):
        """This variable's rate, in float64 (torch's rates are Python doubles)."""
        multiplier = self._multipliers[self._get_variable_index(variable)]

        def make():
            rate = ops.cast(learning_rate, "float64")
            return rate if multiplier == 1.0 else rate * multiplier

        return self.shared(learning_rate, ("rate", multiplier), make)

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

    @staticmethod
    def dense(gradient, dtype):
        """Embedding lookups give sparse (IndexedSlices) gradients; torch's are dense."""
        import tensorflow as tf

        return ops.cast(tf.convert_to_tensor(gradient), dtype)

    def set_weight(self, variable, value) -> None:
        self.assign(variable, ops.cast(value, variable.dtype))


def global_norm(grads):
    """The L2 norm of all gradients together, as torch's ``clip_grad_norm_`` takes it (the norm
    of the per-tensor norms, in float32)."""
    dense = [Float32State.dense(g, "float32") for g in grads if g is not None]
    return ops.sqrt(ops.sum(ops.square(ops.stack([ops.sqrt(ops.sum(ops.square(g))) for g in dense]))))


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
        rate = self.rate(learning_rate, variable)
        lr = self.shared(learning_rate, ("lr", id(rate), dtype), lambda: ops.cast(rate, dtype))
        g = self.dense(gradient, dtype)
        weight = ops.cast(variable, dtype)
        if self.l2 and self.decays(variable):
            g = g + self.constant(learning_rate, self.l2, dtype) * weight
        if self.momentum:
            momentum = self.constant(learning_rate, self.momentum, dtype)
            slot = self._buffers[self._get_variable_index(variable)]
            buffer = ops.convert_to_tensor(slot) * momentum + g
            self.assign(slot, buffer)
            g = g + momentum * buffer if self.nesterov else buffer
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

    ``l2`` is torch.optim.Adam's weight decay (added to the gradient); ``decoupled_decay``
    is AdamW's (the weights shrink by ``lr * decay`` before the step).
    """

    def __init__(
        self,
        learning_rate,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        l2=0.0,
        decoupled_decay=0.0,
        name="torch_adam",
        **kw,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kw)
        self.beta_1, self.beta_2, self.epsilon, self.l2 = beta_1, beta_2, epsilon, l2
        self.decoupled_decay = decoupled_decay

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m = self.state_variables(var_list, "exp_avg")
        self._v = self.state_variables(var_list, "exp_avg_sq")

    def update_step(self, gradient, variable, learning_rate):
        # torch computes the scalars (1 - beta, bias corrections, lr / bc1) in Python
        # doubles and only the tensor arithmetic in float32; so does this, in float64.
        # Each slot is read once, and the new values are used as they are assigned.
        dtype = state_dtype(variable)
        g = self.dense(gradient, dtype)
        weight = ops.cast(variable, dtype)
        if self.l2 and self.decays(variable):
            g = g + self.constant(learning_rate, self.l2, dtype) * weight
        lr = self.rate(learning_rate, variable)
        # AdamW, as torch: param *= 1 - lr * wd, then the Adam step
        if self.decoupled_decay and self.decays(variable):
            shrink = self.shared(
                learning_rate,
                ("shrink", id(lr), dtype),
                lambda: ops.cast(1 - lr * self.decoupled_decay, dtype),
            )
            weight = weight * shrink
        step_size, bias2_sqrt = self.shared(
            learning_rate, ("step", id(lr), dtype), lambda: self.step_scalars(learning_rate, lr, dtype)
        )
        index = self._get_variable_index(variable)
        m, v = ops.convert_to_tensor(self._m[index]), ops.convert_to_tensor(self._v[index])
        m = m + (g - m) * self.constant(learning_rate, 1.0 - self.beta_1, dtype)  # torch: exp_avg.lerp_
        v = v * self.constant(learning_rate, self.beta_2, dtype) + ops.square(g) * self.constant(
            learning_rate, 1.0 - self.beta_2, dtype
        )
        self.assign(self._m[index], m)
        self.assign(self._v[index], v)
        denominator = ops.sqrt(v) / bias2_sqrt + self.constant(learning_rate, self.epsilon, dtype)
        self.set_weight(variable, weight - step_size * (m / denominator))

    def step_scalars(self, learning_rate, lr, dtype: str):
        """``lr / (1 - beta1^t)`` and ``sqrt(1 - beta2^t)`` in ``dtype``, the bias corrections
        taken in float64 (once per update, with :meth:`shared`: recomputed per variable they
        cost a transformer-small 0.4 ms a step)."""
        bias1, bias2_sqrt = self.shared(learning_rate, "bias corrections", self.bias_corrections)
        return ops.cast(lr / bias1, dtype), ops.cast(bias2_sqrt, dtype)

    def bias_corrections(self):
        """``1 - beta1^t`` and ``sqrt(1 - beta2^t)`` in float64, as torch's Python doubles."""
        step = ops.cast(self.iterations + 1, "float64")
        beta_1, beta_2 = (ops.convert_to_tensor(b, dtype="float64") for b in (self.beta_1, self.beta_2))
        return 1 - ops.power(beta_1, step), ops.sqrt(1 - ops.power(beta_2, step))

    def get_config(self):
        return {
            **super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
            "epsilon": self.epsilon, "l2": self.l2, "decoupled_decay": self.decoupled_decay,
        }  # fmt: skip


def build_optimizer(
    cfg,
    table,
    accumulate: int = 1,
    lr_multipliers: dict[str, float] | None = None,
    decay_exempt: set[str] | None = None,
    clip_norm: float | None = None,
    grad_norm_every: int | None = None,
) -> keras.optimizers.Optimizer:
    """``table`` holds one rate per optimizer step. With gradient accumulation Keras reads
    the schedule at its micro-step counter, so each rate is repeated ``accumulate`` times."""
    schedule = TableSchedule(np.repeat(table, accumulate) if accumulate > 1 else table)
    common = {
        "gradient_accumulation_steps": accumulate if accumulate > 1 else None,
        "lr_multipliers": lr_multipliers,
        "decay_exempt": decay_exempt,
        "clip_norm": clip_norm,
        "grad_norm_every": grad_norm_every,
    }
    if cfg.name == "sgd":
        return TorchSGD(schedule, cfg.momentum, cfg.nesterov, cfg.weight_decay, **common)
    beta_1, beta_2 = cfg.betas
    if cfg.name == "adam":
        return TorchAdam(schedule, beta_1, beta_2, cfg.eps, l2=cfg.weight_decay, **common)
    return TorchAdam(
        schedule, beta_1, beta_2, cfg.eps, decoupled_decay=cfg.weight_decay, name="torch_adamw", **common
    )
