"""Block-wise gradient checkpointing for zoo's Keras twins: ``keras.remat`` made safe for training.

``keras.remat`` (``tf.recompute_grad`` on this backend) keeps only a block's inputs and runs
the block a second time in the backward pass. Three things go wrong with a plain
``keras.remat(block)``, and :func:`checkpointed_call` handles each:

- Dropout draws its seed from a ``SeedGenerator`` whose state advances on every call, so
  the recompute would drop other units than the forward pass did and the gradients would
  belong to no mask at all. Here every Dropout inside the block draws its seed once, in
  the outer call, exactly as it would without checkpointing; the seeds enter the
  rematerialised function as positional tensors and both runs replay them. Masks are
  therefore bit-identical with checkpointing on or off.
- State written in the forward pass (BatchNorm running statistics, its batch counter)
  would be written again by the recompute. The recompute restores it afterwards, so each
  training step updates it once, as the torch twin does.
- ``tf.custom_gradient`` in graph mode (``fit``) takes positional tensors only, and
  ``recompute_grad`` adds a zero to every argument to order the recompute, which boolean
  tensors cannot take; such arguments (masks, ``None``) are closed over instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf


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


def checkpointed_call(block: keras.layers.Layer, *args: Any) -> Any:
    """``block(*args, training=True)``, its activations recomputed in the backward pass.

    Only the tensor arguments and the output are kept for backward; the seeds of the
    block's dropout masks are drawn here, once, and replayed by the recompute.
    """
    dropouts = _dropouts(block)
    seeds = [layer.seed_generator.next() for layer in dropouts]
    passed = [i for i, a in enumerate(args) if _passable(a)]
    state = list(block.non_trainable_variables)
    calls = 0

    def run(*tensors: tf.Tensor) -> Any:
        nonlocal calls
        calls += 1
        values = list(args)
        for i, tensor in zip(passed, tensors[: len(passed)], strict=True):
            values[i] = tensor
        with _SeedsReplayed(dropouts, tensors[len(passed) :]):
            if calls == 1:
                return block(*values, training=True)
            return _without_state_updates(state, lambda: block(*values, training=True))

    return keras.remat(run)(*(args[i] for i in passed), *seeds)


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
