"""Speed and memory of one recipe in each framework, measured the same way on both sides.

Both twins run the recipe's real config (dropout included), each through its trainer's
step without the trainer's loop: the Lightning task's loss, optimizer and scheduler, and
the Keras model's compiled ``train_step`` (:mod:`zoo.compare.steps`). Timed windows
alternate between the frameworks, so load from other processes on a shared machine hits
both alike; the figure is the median window. The first step is timed on its own: for
TensorFlow it includes tracing the graph.

Activation memory is the same quantity on both sides: the bytes autograd keeps from the
forward pass for the backward. torch reports it through ``saved_tensors_hooks`` (each
storage once, parameters excluded); for TensorFlow it is read off the traced step's graph
(every forward tensor a gradient op consumes, variable reads excluded, loop accumulators
times their trip count). TensorFlow's allocator peak during a step is reported too, but
on oneDNN builds (the default on x86) its small-allocation pool keeps no statistics, so
small models read as almost nothing there.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from zoo.compare.steps import Batch, KerasStep, TorchStep, training_batches
from zoo.compare.twins import Setup, build_twins
from zoo.memory import saved_for_backward

DISTINCT_BATCHES = 8  # batches cycled through while timing


@dataclass(frozen=True)
class Timing:
    """How long to measure: ``warmup`` untimed steps after the first, then ``windows``
    windows of ``window_steps`` steps each."""

    warmup: int = 3
    windows: int = 5
    window_steps: int = 10

    @classmethod
    def for_steps(cls, steps: int) -> Timing:
        """About ``steps`` timed steps per framework in 5 windows (fewer for very few steps)."""
        windows = min(5, max(1, steps))
        return cls(warmup=min(3, max(1, steps // 10)), windows=windows, window_steps=max(1, steps // windows))


@dataclass
class FrameworkSpeed:
    framework: str
    samples_per_s: float
    ms_per_step: float  # median over the windows
    first_step_ms: float  # includes graph tracing on TensorFlow, optimizer state on both
    activation_bytes: int | None
    activation_measure: str
    parameters: int
    window_ms_per_step: list[float] = field(default_factory=list)
    allocator_peak_bytes: int | None = None  # TensorFlow only: see keras_memory
    allocator_measure: str | None = None


def measure_speed(setup: Setup, table: np.ndarray, timing: Timing) -> dict[str, Any]:
    """Time training steps of the recipe's config (dropout as configured) in both frameworks."""
    twins = build_twins(setup, setup.config)
    distinct = full_batches(
        setup, min(DISTINCT_BATCHES, timing.warmup + 1 + timing.windows * timing.window_steps)
    )
    batch = distinct[0].size

    torch_first, torch_step = _first_step(lambda: TorchStep(twins, table), distinct[0], "torch")
    keras_first, keras_step = _first_step(lambda: KerasStep(twins, table), distinct[0], "keras")
    torch_batches = [(torch_step.batch(b),) for b in distinct]
    keras_batches = [b.keras for b in distinct]
    for i in range(timing.warmup):
        torch_step(*torch_batches[(i + 1) % len(torch_batches)])
        _sync(keras_step(*keras_batches[(i + 1) % len(keras_batches)]))
    torch_windows, keras_windows = [], []
    for _ in range(timing.windows):
        torch_windows.append(_window(torch_step, torch_batches, timing.window_steps))
        keras_windows.append(_window(keras_step, keras_batches, timing.window_steps))

    results = {
        "torch": _summary(
            "torch", torch_windows, torch_first, batch, *torch_memory(torch_step, torch_batches[0][0])
        ),
        "keras": _summary(
            "keras", keras_windows, keras_first, batch, *keras_saved_bytes(keras_step, *keras_batches[0])
        ),
    }
    results["keras"].allocator_peak_bytes, results["keras"].allocator_measure = keras_memory(
        keras_step, keras_batches[0]
    )
    results["torch"].parameters = sum(p.numel() for p in twins.torch_model.parameters() if p.requires_grad)
    results["keras"].parameters = sum(int(np.prod(v.shape)) for v in twins.keras_model.trainable_variables)
    return {
        "batch_size": batch,
        "timing": asdict(timing),
        "dropout": setup.zeroed,  # kept as configured here, unlike in the parity sections
        **{name: asdict(value) for name, value in results.items()},
    }


def _sync(loss: Any) -> float:
    """Wait for the step: read its loss (both frameworks compute on the CPU synchronously
    here, but reading the value makes that explicit and costs the same on both sides)."""
    return float(loss)


def full_batches(setup: Setup, count: int) -> list[Batch]:
    """``count`` training batches of the recipe's batch size (timing wants one shape); an
    epoch's smaller last batch is left out unless no batch is full (a batch larger than the
    training set)."""
    per_epoch = -(-len(setup.dataset.train) // setup.batch_size)
    partial = -(-count // max(1, per_epoch - 1))  # at most one per epoch
    drawn = training_batches(setup, count + partial)
    full = [b for b in drawn if b.size == setup.batch_size] or drawn
    return full[:count]


def _first_step(make: Callable[[], Any], batch: Batch, side: str) -> tuple[float, Any]:
    started = time.perf_counter()
    step = make()
    if side == "torch":
        _sync(step(step.batch(batch)))
    else:
        _sync(step(*batch.keras))
    return (time.perf_counter() - started) * 1e3, step


def _window(step: Callable, batches: list[tuple], count: int) -> float:
    started = time.perf_counter()
    loss = None
    for i in range(count):
        loss = step(*batches[i % len(batches)])
    _sync(loss)
    return (time.perf_counter() - started) * 1e3 / count


def _summary(framework, windows, first_ms, batch, memory, measure) -> FrameworkSpeed:
    ms = statistics.median(windows)
    return FrameworkSpeed(
        framework,
        batch * 1e3 / ms if ms > 0 else float("inf"),
        ms,
        first_ms,
        memory,
        measure,
        0,
        [round(w, 4) for w in windows],
    )


def torch_memory(step: TorchStep, batch: tuple) -> tuple[int, str]:
    """Bytes autograd saves for backward in one forward pass and the task's loss, each storage once."""
    task = step.task
    task.train()
    with saved_for_backward(exclude=task.parameters()) as saved, step.plugin.forward_context():
        loss = task.loss_and_metrics(batch)[0]
    del loss
    return sum(saved.values()), "saved for backward (forward + loss, parameters excluded)"


# Ops whose output is (or may be) a view of their input: one buffer, counted once.
ALIASING_OPS = {"Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "StopGradient", "Snapshot"}
GRADIENT_SCOPE = "gradient_tape"


def keras_saved_bytes(step: KerasStep, x, y) -> tuple[int | None, str]:
    """Bytes the gradient reads from the forward pass, found in the traced step's graph:
    every forward tensor a backward op consumes (variable reads excluded, views followed
    to their buffer), and for a ``while`` loop (recurrent layers) each tensor it
    accumulates per iteration times the trip count. Like torch's figure, these are the
    activations autograd keeps; TensorFlow's own allocator statistics cannot say this on
    oneDNN builds, whose small-allocation pool keeps no statistics."""
    import tensorflow as tf

    model = step.model
    variables = model.trainable_variables

    traced: dict[str, str] = {}

    @tf.function
    def gradients(x, y):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True), training=True)
        traced["loss"] = loss.name
        return tape.gradient(loss, variables)

    graph = gradients.get_concrete_function(x, y).graph
    forward, backward = forward_and_backward(graph, graph.get_tensor_by_name(traced["loss"]).op)
    seen: set[str] = set()
    total, unsized = 0, 0
    for op in forward:
        for index, tensor in enumerate(op.outputs):
            if not any(c in backward for c in tensor.consumers()):
                continue
            if op.type in ("While", "StatelessWhile") and tensor.dtype == tf.variant:
                size = _loop_accumulator_bytes(graph, op, index)
            elif tensor.dtype in (tf.resource, tf.variant):
                continue  # a variable handle or an empty list: no activation behind it
            else:
                root = _buffer(tensor)
                if root.op.type in ("ReadVariableOp", "Const") or root.name in seen:
                    continue
                seen.add(root.name)
                size = _bytes(root)
            if size is None:
                unsized += 1
            else:
                total += size
    note = "saved for backward (traced graph: tensors the gradient reads, variable reads excluded)"
    if unsized:
        note += f"; {unsized} tensors of unknown size not counted"
    return total, note


def forward_and_backward(graph, loss_op) -> tuple[set, set]:
    """Split a traced training step into the forward pass and the backward pass.

    Forward: the loss and everything it depends on. Backward: the ops the tape created
    and everything that runs after them, forward ops excepted. The tape's name scope
    alone would not do: TensorFlow creates some ops there that feed the forward pass
    (empty loop accumulators), and gradient checkpointing recomputes a block's forward
    inside the backward outside that scope (those ops wait on the incoming gradient, so
    they follow tape ops and their outputs are not activations kept from the forward).
    """
    forward = {loss_op}
    stack = [loss_op]
    while stack:
        op = stack.pop()
        for parent in [t.op for t in op.inputs] + list(op.control_inputs):
            if parent not in forward:
                forward.add(parent)
                stack.append(parent)
    backward = {
        op for op in graph.get_operations() if op.name.startswith(GRADIENT_SCOPE) and op not in forward
    }
    stack = list(backward)
    while stack:
        op = stack.pop()
        following = [c for t in op.outputs for c in t.consumers()] + list(op._control_outputs)
        for child in following:
            if child not in backward and child not in forward:
                backward.add(child)
                stack.append(child)
    return forward, backward


def _buffer(tensor):
    while tensor.op.type in ALIASING_OPS and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    return tensor


def _bytes(tensor) -> int | None:
    count = tensor.shape.num_elements()
    return None if count is None or tensor.dtype.size == 0 else count * tensor.dtype.size


def _loop_accumulator_bytes(graph, loop, index: int) -> int | None:
    """A ``while`` output the gradient reads is a list the body pushes one tensor onto per
    iteration: that tensor's size times the trip count (the loop's static iteration limit)."""
    import tensorflow as tf

    body = graph._get_function(loop.get_attr("body").name).graph
    pushed = body.outputs[index]
    if pushed.op.type != "TensorListPushBack":
        return 0  # a list the loop reads or fills in place: an input or the layer's own output
    element = pushed.op.inputs[1]
    if _buffer(element).op.type in ("ReadVariableOp", "Const", "Placeholder"):
        return 0  # a weight (or a value captured from outside) pushed each step: not a new buffer
    limit = loop.inputs[1]  # while_v2's inputs: loop counter, maximum iterations, ...
    trips = tf.get_static_value(limit)
    if trips is None and limit.op.type in ("Max", "Min", "Identity") and limit.op.inputs:
        value = tf.get_static_value(limit.op.inputs[0])
        trips = None if value is None else np.max(value)
    size = _bytes(element)
    return None if trips is None or size is None else int(trips) * size


def keras_memory(step: KerasStep, batch: tuple) -> tuple[int | None, str]:
    """Peak of TensorFlow's CPU allocator during one traced step, above the memory before it."""
    import tensorflow as tf

    measure = (
        "allocator peak during a step above the memory before it (oneDNN's small-allocation pool not counted)"
    )
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        _sync(step(*batch))
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    except (ValueError, RuntimeError) as error:  # an allocator without statistics
        return None, f"not available ({error})"
    return int(peak - before), measure
