"""A Keras twin built without computing its initial weights: what loading a checkpoint needs.

Keras 3 has no meta device: building a twin runs every initialiser (TensorFlow's random
normal over 124M floats is ~2-3 s on two cores for gpt2) and a family's ``build`` may then
draw some weights again (``keras.random.normal`` for GPT-2's residual projections), all to be
overwritten by the checkpoint. Inside :func:`initialisers_skipped` a variable made from a
``keras.initializers.Initializer`` is left without a TensorFlow variable at all, as Keras
leaves a variable made in a stateless scope, until :func:`fill` makes one of the value the
checkpoint holds; ``keras.random``'s ``normal``/``uniform``/``truncated_normal`` return
uninitialised tensors, recorded. Making each TensorFlow variable once, from its final value,
halves the build: gpt2-medium's 0.64 s with a variable of uninitialised memory made at once,
0.36 s deferred (the ~290 variables' handles, buffers and first assignments). The model is
only usable once the checkpoint fills every such variable: :meth:`Skipped.covered_by` says
whether it will, and the caller builds the ordinary way when it would not (as
``load_torch`` does when meta tensors are left). Seed generators' states (plain callables,
not Initializers) are initialised as usual, so dropout draws what an ordinary build would.

The patches reach into Keras' TensorFlow ``Variable`` (private API, checked at entry: a
Keras without it builds the ordinary way) and are not thread-safe: a load builds in one thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

try:  # private API: a Keras without it builds the ordinary way (:func:`available`)
    from keras.src.backend.common.variables import Variable as CommonVariable
    from keras.src.backend.tensorflow.core import Variable
except ImportError:
    CommonVariable = Variable = None

RANDOM_DRAWS = ("normal", "uniform", "truncated_normal")


@dataclass
class Skipped:
    """What a skeleton build left without values: variables and random draws (by ``id``)."""

    variables: dict[int, Any] = field(default_factory=dict)
    draws: dict[int, Any] = field(default_factory=dict)  # id -> tensor, kept alive so ids stay unique
    assigned_draws: set[int] = field(default_factory=set)
    randomised: dict[int, Any] = field(default_factory=dict)  # variables given a recorded draw

    def covered_by(self, variables: Iterator[Any]) -> bool:
        """True when ``variables`` (those the checkpoint fills) include every variable left
        without values and every draw went into one of them (a draw kept anywhere else, a
        buffer computed from it, would stay garbage)."""
        filled = {id(v) for v in variables}
        return (
            set(self.variables) <= filled
            and set(self.randomised) <= filled
            and set(self.draws) == self.assigned_draws
        )


def fill(variable: Any, value: Any) -> None:
    """Give ``variable`` the backend tensor ``value`` (its shape and dtype): a variable that
    :func:`initialisers_skipped` left without a TensorFlow variable gets one made from it;
    any other is assigned it. Neither copies ``value``."""
    if getattr(variable, "_value", True) is None:
        variable._initialize(value)
        variable._initializer = None
    else:
        variable.assign(value)


def available() -> bool:
    """Keras on TensorFlow with the private hooks this module patches."""
    return (
        Variable is not None
        and keras.backend.backend() == "tensorflow"
        and hasattr(Variable, "_initialize_with_initializer")
        and hasattr(Variable, "_initialize")
        and hasattr(Variable, "_convert_to_tensor")
        and hasattr(CommonVariable, "assign")
        and isinstance(getattr(CommonVariable, "value", None), property)
        and all(hasattr(keras.random, name) for name in RANDOM_DRAWS)
    )


@contextlib.contextmanager
def initialisers_skipped() -> Iterator[Skipped]:
    """Build Keras models whose initial weights are not computed; yields the record."""
    skipped = Skipped()
    initialise, assign = Variable._initialize_with_initializer, CommonVariable.assign
    read_value = CommonVariable.value
    draws = {name: getattr(keras.random, name) for name in RANDOM_DRAWS}

    def empty(shape, dtype) -> Any:
        shape = [int(s) for s in shape]
        return tf.raw_ops.Empty(shape=shape, dtype=tf.as_dtype(dtype or keras.config.floatx()), init=False)

    def skip_initialiser(self, initializer):
        if not isinstance(initializer, keras.initializers.Initializer):
            return initialise(self, initializer)  # seed generators' states and other callables
        skipped.variables[id(self)] = self
        self._value, self._initializer = None, initializer  # Keras' own deferred state
        return None

    def materialised(self):
        if self._value is None and id(self) in skipped.variables:  # a build that reads it
            self._initialize(empty(self._shape, self._dtype))  # uninitialised memory
        return read_value.fget(self)

    def recorded_assign(self, value):
        if id(value) in skipped.draws:
            skipped.assigned_draws.add(id(value))
            skipped.randomised[id(self)] = self
        if self._value is None:  # a build assigning to a variable left without one
            fill(self, self._convert_to_tensor(value, dtype=self._dtype))
            return value
        return assign(self, value)

    def undrawn(shape, *args, dtype=None, **kwargs):
        tensor = empty(shape, dtype)
        skipped.draws[id(tensor)] = tensor
        return tensor

    Variable._initialize_with_initializer = skip_initialiser
    CommonVariable.assign = recorded_assign
    CommonVariable.value = property(materialised)
    for name in RANDOM_DRAWS:
        setattr(keras.random, name, undrawn)
    try:
        yield skipped
    finally:
        Variable._initialize_with_initializer = initialise
        CommonVariable.assign = assign
        CommonVariable.value = read_value
        for name, function in draws.items():
            setattr(keras.random, name, function)
