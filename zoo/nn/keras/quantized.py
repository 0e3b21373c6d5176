"""A quantized checkpoint's weights held as its integers in the Keras twin, as the torch twin
holds them (zoo.nn.torch.quantized).

Keras has no parametrization, so this is torch's own way of making one: the layer's class is
swapped for a subclass in which the weight's attribute (``kernel``, ``embeddings``) is a
property. The layer keeps two non-trainable variables, the integers as stored (in the
canonical, torch layout) and the float32 scales, and reading the attribute makes the float32
weight ``q * scale`` (one float32 product per weight: ``zoo.checkpoint.quantized.dequantize``'s
arithmetic, so the numbers are the float load's to the bit), then lays it out as the Keras
variable was (the port's ``layouts``: a transpose) and, inside a mixed-precision call, casts it
to the compute dtype as Keras autocasts a float variable. Only weights whose variable is one
tensor transposed are held so (dense, convolution and embedding kernels, the fused attention
projection); a variable fused or reordered from several tensors (a recurrent cell's gates)
stays float32.

Keras' own ``quantize("int8")`` is not used: its int8 Dense also quantizes the inputs, per
token (``docs/precision.md``), which the torch twin does not.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import keras
import numpy as np
from keras import ops
from keras.src.backend import get_autocast_scope  # how Keras decides to cast a variable it reads

from zoo.checkpoint.quantized import SCALE, Scheme
from zoo.checkpoint.tables import Port, keras_layer

INTEGERS, SCALES = "_integers", "_scales"  # the variables a held weight keeps: kernel_integers ...


@dataclass(frozen=True)
class Held:
    """How one attribute's weight is made: its canonical shape, the transpose into the Keras
    layout, the int4 groups (None for int8), the variable's dtype (a "-true" precision's), and
    whether Keras would autocast it."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]
    group_size: int | None
    dtype: str
    autocast: bool


def hold_integers(
    model, table: Sequence[Port], stored: Mapping[str, np.ndarray], scheme: Scheme
) -> list[str]:
    """Replace each weight of ``model`` that ``stored`` (a quantized checkpoint's tensors as
    stored) holds as integers and scales, where its port lays it out by a transpose; returns
    the names now held so."""
    held = []
    for port in table:
        for spec, path, axes in zip(port.tensors, port.variables, port.layouts, strict=False):
            if axes is None or spec.name + SCALE not in stored:
                continue
            owner_path, _, attribute = f"{port.layer}.{path}".rpartition(".")
            owner = keras_layer(model, owner_path)
            variable = getattr(owner, attribute)
            _hold(owner, attribute, variable, stored[spec.name], stored[spec.name + SCALE], Held(
                spec.shape, axes, scheme.group_size, variable.dtype, getattr(variable, "_autocast", True)
            ))  # fmt: skip
            held.append(spec.name)
    return held


def _hold(layer, attribute: str, variable, integers: np.ndarray, scales: np.ndarray, held: Held) -> None:
    stored_at = next(name for name, value in vars(layer).items() if value is variable)  # _kernel or kernel
    layer._untrack_variable(variable)
    object.__delattr__(layer, stored_at)  # not Layer.__delattr__: it runs gc.collect() every time
    layer._tracker.unlock()
    try:
        for suffix, value in ((INTEGERS, integers), (SCALES, scales)):
            name = f"{attribute}{suffix}"
            setattr(layer, name, keras.Variable(np.array(value), trainable=False, autocast=False, name=name))
    finally:
        layer._tracker.lock()
    layouts = {**getattr(layer, "_zoo_held", {}), attribute: held}
    object.__setattr__(layer, "_zoo_held", layouts)  # plain data, not for Keras to track
    layer.__class__ = _with_property(type(layer), attribute)


@functools.cache
def _with_property(cls: type, attribute: str) -> type:
    """``cls`` with ``attribute`` made from the layer's integers and scales when it is read
    (cached: one subclass per layer class and attribute, as torch's parametrize makes)."""

    def weight(layer):
        held = layer._zoo_held[attribute]
        value = dequantize(getattr(layer, attribute + INTEGERS), getattr(layer, attribute + SCALES), held)
        if list(held.axes) != sorted(held.axes):
            value = ops.transpose(value, held.axes)
        if held.dtype != "float32":  # made in float32, then rounded once, as the variable was
            value = ops.cast(value, held.dtype)
        scope = get_autocast_scope()
        return scope.maybe_cast(value) if held.autocast and scope is not None else value

    return type(cls.__name__, (cls,), {attribute: property(weight)})


def dequantize(integers, scales, held: Held):
    """The float32 weight in the canonical layout: each integer times its group's scale."""
    rows, columns = held.shape[0], math.prod(held.shape[1:])
    values = ops.reshape(integers, (rows, columns)) if held.group_size is None else unpack(integers, columns)
    groups = scales.shape[1]
    size = held.group_size or columns
    values = ops.cast(values, "float32")
    if groups * size != columns:  # the last group is shorter: padded as the quantizer pads it
        values = ops.pad(values, ((0, 0), (0, groups * size - columns)))
    weight = ops.reshape(values, (rows, groups, size)) * ops.expand_dims(ops.convert_to_tensor(scales), 2)
    return ops.reshape(ops.reshape(weight, (rows, groups * size))[:, :columns], held.shape)


def unpack(packed, columns: int):
    """int4 bytes (low nibble first, two's complement) as (rows, columns) int8."""
    packed = ops.convert_to_tensor(packed)
    low, high = ops.bitwise_and(packed, 15), ops.right_shift(packed, 4)
    nibbles = ops.reshape(ops.stack([low, high], axis=2), (packed.shape[0], -1))[:, :columns]
    return ops.cast(ops.bitwise_xor(nibbles, 8), "int8") - 8


def held_bytes(model) -> int:
    """Bytes of the variables ``model`` holds, each once."""
    seen = {id(v): math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in model.variables}
    return sum(seen.values())
