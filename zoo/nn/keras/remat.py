"""Block-wise gradient checkpointing for zoo's Keras twins: rematerialisation made safe for training.

A checkpointed block keeps only its inputs for backward and runs again in the backward
pass. ``keras.remat`` (``tf.recompute_grad`` on this backend) does that, but four things go
wrong with a plain ``keras.remat(block)``; :func:`checkpointed_call` and
:func:`recompute_grad` handle each:

- Dropout draws its seed from a ``SeedGenerator`` whose state advances on every call, so
  the recompute would drop other units than the forward pass did and the gradients would
  belong to no mask at all. Here every Dropout inside the block draws its seed once, in
  the outer call, exactly as it would without checkpointing; the seeds enter the
  rematerialised function as positional tensors and both runs replay them. Masks are
  therefore bit-identical with checkpointing on or off.
- State written in the forward pass (BatchNorm running statistics, its batch counter)
  would be written again by the recompute. The recompute restores it afterwards, so each
  training step updates it once, as the torch twin does.
- ``tf.custom_gradient`` in graph mode (``fit``) takes positional tensors only, and the
  recompute adds a zero to every argument to order itself, which boolean tensors cannot
  take; such arguments (masks, ``None``) are closed over instead.
- ``tf.recompute_grad`` hands a block's input gradient on before the block's weight
  gradients are done, so TensorFlow may recompute the previous block while this block's
  activations still wait for their weight-gradient ops. With one inter-op thread the
  executor does exactly that: a 6-block transformer step peaked at ~100 MiB instead of
  ~42 MiB (194 MiB without checkpointing), and a 6-layer LSTM saved next to nothing.
  :func:`recompute_grad` is ``tf.recompute_grad`` with that ordering added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

# Private, but what tf.recompute_grad itself uses to hide the forward pass; TF is pinned to 2.21.
from tensorflow.python.eager import record


class _ReplayedSeed(keras.random.SeedGenerator):
    """A seed drawn beforehand, handed to a Dropout layer in place of its generator.

    Keras' dropout accepts only a ``SeedGenerator`` (or an int) and calls its ``next()``;
    this one returns the given seed tensor and owns no state variable, which is why it
    skips ``SeedGenerator.__init__``.
    """

    def __init__(self, seed: tf.Tensor, owner: str):  # no super().__init__(): no state variable
        self._seed = seed
        self._owner = owner
        self._drawn = False

    def next(self, ordered: bool = True) -> tf.Tensor:
        if self._drawn:
            raise RuntimeError(
                f"dropout layer {self._owner!r} ran twice in one checkpointed block call; a replayed "
                "seed would repeat its mask, so gradient checkpointing cannot wrap this block"
            )
        self._drawn = True
        return self._seed


def _dropouts(block: keras.layers.Layer) -> list[keras.layers.Dropout]:
    """Every Dropout that draws a mask inside ``block`` (MultiHeadAttention's own included)."""
    found = block._flatten_layers(include_self=True, recursive=True)
    return [layer for layer in found if isinstance(layer, keras.layers.Dropout) and layer.rate > 0]


class _SeedsReplayed:
    """Within the ``with``, each Dropout in ``dropouts`` uses the matching pre-drawn seed."""

    def __init__(self, dropouts: Sequence[keras.layers.Dropout], seeds: Sequence[tf.Tensor]):
        self.dropouts = dropouts
        self.seeds = seeds

    def __enter__(self) -> None:
        self.generators = [layer.seed_generator for layer in self.dropouts]
        for layer, seed in zip(self.dropouts, self.seeds, strict=True):
            # object.__setattr__: Keras' attribute tracking must not see the stand-in.
            object.__setattr__(layer, "seed_generator", _ReplayedSeed(seed, layer.name))

    def __exit__(self, *exc: object) -> None:
        for layer, generator in zip(self.dropouts, self.generators, strict=True):
            object.__setattr__(layer, "seed_generator", generator)


def checkpointed_call(block: keras.layers.Layer, *args: Any, **constants: Any) -> Any:
    """``block(*args, training=True, **constants)``, its activations recomputed in the backward pass.

    Only the tensor arguments and the output are kept for backward; the seeds of the
    block's dropout masks are drawn here, once, and replayed by the recompute. ``constants``
    (a padding mask) are passed to both calls as they are and get no gradient.
    """
    dropouts = _dropouts(block)
    seeds = [layer.seed_generator.next() for layer in dropouts]
    passed = [i for i, a in enumerate(args) if _passable(a)]
    # The recompute leaves the seed generators alone (it replays the seeds drawn above).
    seed_states = {id(layer.seed_generator.state) for layer in dropouts}
    state = [v for v in block.non_trainable_variables if id(v) not in seed_states]
    calls = 0

    def run(*tensors: tf.Tensor) -> Any:
        nonlocal calls
        calls += 1
        values = list(args)
        for i, tensor in zip(passed, tensors[: len(passed)], strict=True):
            values[i] = tensor
        with _SeedsReplayed(dropouts, tensors[len(passed) :]):
            if calls == 1:
                return block(*values, training=True, **constants)
            return _without_state_updates(state, lambda: block(*values, training=True, **constants))

    return recompute_grad(run)(*(args[i] for i in passed), *seeds)


def recompute_grad(fn: Callable[..., tf.Tensor]) -> Callable[..., tf.Tensor]:
    """``tf.recompute_grad(fn)`` whose input gradients wait for its weight gradients.

    ``fn`` takes positional tensors and returns one tensor. The forward pass keeps only the
    arguments; the backward pass reruns ``fn`` once the output gradient exists (a data
    dependency, which XLA respects too), differentiates the rerun, and releases the input
    gradients, and with them the previous block's recompute, only after this block's
    weight gradients, so at most one block's activations are alive at a time.
    """

    @tf.custom_gradient
    def call(*args: tf.Tensor):
        with record.stop_recording():  # no outer tape keeps the forward pass's activations
            result = fn(*args)

        def grad(*upstream: tf.Tensor, variables: list[tf.Variable] | None = None):
            inputs = [tf.identity(a) for a in args]
            if not tf.executing_eagerly():  # graph ops run as soon as their inputs are ready
                # 0 computed from the upstream gradient (as tf.recompute_grad does): the rerun
                # waits for it, and no graph optimiser can prove it constant and drop it.
                first = tf.cast(tf.reduce_max(tf.reshape(upstream[0], [-1])[:1]), tf.bool)
                zero = tf.where(first == first, 0.0, float("nan"))
                inputs = [a + tf.cast(zero, a.dtype) for a in inputs]
            floats = [i for i, a in enumerate(inputs) if a.dtype.is_floating]
            sources = [inputs[i] for i in floats] + list(variables or ())
            with tf.GradientTape() as tape:
                tape.watch(sources)
                recomputed = fn(*inputs)
            grads = tape.gradient(
                recomputed, sources, list(upstream), unconnected_gradients=tf.UnconnectedGradients.ZERO
            )
            weight_grads = grads[len(floats) :]
            with tf.control_dependencies(tf.nest.flatten(weight_grads, expand_composites=True)):
                input_grads: list[tf.Tensor | None] = [None] * len(inputs)
                for i, g in zip(floats, grads[: len(floats)], strict=True):
                    input_grads[i] = tf.identity(g)
            return input_grads if variables is None else (input_grads, weight_grads)

        return result, grad

    return call


def _passable(value: Any) -> bool:
    """Whether ``value`` can be a positional argument of the rematerialised function."""
    return tf.is_tensor(value) and value.dtype != tf.bool


def _without_state_updates(state: Sequence[keras.Variable], fn: Callable[[], Any]) -> Any:
    """Run ``fn`` and put every variable in ``state`` back as it was before."""
    saved = [tf.identity(variable.value) for variable in state]
    result = fn()
    # Read the result first, so the restore is ordered after the writes inside fn.
    with tf.control_dependencies(tf.nest.flatten(result)):
        for variable, value in zip(state, saved, strict=True):
            variable.assign(value)
    return result
