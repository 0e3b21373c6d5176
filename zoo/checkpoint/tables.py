"""Weight tables: the one place a family says how its torch tensors become Keras variables.

A table is a list of :class:`Port`, one per layer. A port names the layer's canonical
tensors (exactly the torch twin's ``state_dict`` entries, with shapes) and the Keras
layer's variables, and two pure numpy functions that convert one group into the other.
Everything else (checkpoint validation, parameter counts, conversion in both directions)
is derived from the table, so a family never writes conversion code twice.

Keras variables are found by attribute path on the model object (``blocks.0.conv``),
never by Keras' variable paths: those are renamed when a second model instance exists.
Reading a twin's variables through a table, and assigning them, is
:mod:`zoo.checkpoint.keras_variables`'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

Arrays = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    trainable: bool = True


@dataclass(frozen=True)
class Port:
    """One layer's tensors. ``variables`` are attribute paths from ``layer`` (``cell.kernel``).

    ``layouts`` says, for each variable, the axes that transpose the tensor at the same place
    into it, where the variable is that one tensor transposed (a dense kernel, a convolution's,
    an embedding: ``(0, 1)``), and None where it is not (fused, reshaped or reordered): what a
    Keras twin needs to hold a quantized weight as its integers (zoo.nn.keras.quantized)."""

    tensors: tuple[TensorSpec, ...]
    layer: str
    variables: tuple[str, ...]
    to_keras: Callable[..., Arrays]
    to_torch: Callable[..., Arrays]
    layouts: tuple[tuple[int, ...] | None, ...] = ()


def _identity(*arrays: np.ndarray) -> Arrays:
    return tuple(arrays)


def _t(name: str, shape: Iterable[int], dtype: str = "float32", trainable: bool = True):
    return TensorSpec(name, tuple(int(s) for s in shape), dtype, trainable)


def dense(
    name: str,
    in_features: int,
    out_features: int,
    *,
    bias: bool = True,
    layer: str | None = None,
    flatten_chw: tuple[int, int, int] | None = None,
) -> Port:
    """``nn.Linear`` <-> ``keras.layers.Dense``.

    ``flatten_chw`` is the (C, H, W) of a conv map flattened just before this layer:
    torch flattens channels first, Keras (channels_last) channels last, so the input
    rows of the kernel are permuted to match.
    """
    tensors = [_t(f"{name}.weight", (out_features, in_features))]
    variables = ["kernel"]
    if bias:
        tensors.append(_t(f"{name}.bias", (out_features,)))
        variables.append("bias")

    def to_keras(weight: np.ndarray, *rest: np.ndarray) -> Arrays:
        if flatten_chw is None:
            return (weight.T, *rest)
        c, h, w = flatten_chw
        kernel = weight.reshape(out_features, c, h, w).transpose(2, 3, 1, 0)
        return (kernel.reshape(h * w * c, out_features), *rest)

    def to_torch(kernel: np.ndarray, *rest: np.ndarray) -> Arrays:
        if flatten_chw is None:
            return (kernel.T, *rest)
        c, h, w = flatten_chw
        weight = kernel.reshape(h, w, c, out_features).transpose(3, 2, 0, 1)
        return (weight.reshape(out_features, c * h * w), *rest)

    layouts = ((1, 0) if flatten_chw is None else None, None)[: len(tensors)]
    return Port(tuple(tensors), layer or name, tuple(variables), to_keras, to_torch, layouts)


def conv2d(name: str, in_channels: int, out_channels: int, kernel_size: int, *, bias: bool = True) -> Port:
    """``nn.Conv2d`` (O, I, kh, kw) <-> ``keras.layers.Conv2D`` (kh, kw, I, O)."""
    shape = (out_channels, in_channels, kernel_size, kernel_size)
    return _kernel(name, shape, bias, to_keras=(2, 3, 1, 0), to_torch=(3, 2, 0, 1))


def depthwise_conv2d(name: str, channels: int, kernel_size: int, *, bias: bool = True) -> Port:
    """``nn.Conv2d(C, C, k, groups=C)`` (C, 1, kh, kw) <-> ``keras.layers.DepthwiseConv2D`` (kh, kw, C, 1)."""
    shape = (channels, 1, kernel_size, kernel_size)
    return _kernel(name, shape, bias, to_keras=(2, 3, 0, 1), to_torch=(2, 3, 0, 1))


def _kernel(name: str, shape: tuple[int, ...], bias: bool, *, to_keras, to_torch) -> Port:
    """A convolution's weight (and bias, of its first axis), the kernel transposed by the axes given."""
    tensors = [_t(f"{name}.weight", shape)]
    variables = ["kernel"]
    if bias:
        tensors.append(_t(f"{name}.bias", (shape[0],)))
        variables.append("bias")
    return Port(
        tuple(tensors),
        name,
        tuple(variables),
        lambda w, *rest: (w.transpose(*to_keras), *rest),
        lambda k, *rest: (k.transpose(*to_torch), *rest),
        (tuple(to_keras), None)[: len(tensors)],
    )


def batchnorm(name: str, channels: int) -> Port:
    """``nn.BatchNorm*d`` <-> zoo's Keras ``BatchNorm`` (torch semantics, same five tensors)."""
    tensors = (
        _t(f"{name}.weight", (channels,)),
        _t(f"{name}.bias", (channels,)),
        _t(f"{name}.running_mean", (channels,), trainable=False),
        _t(f"{name}.running_var", (channels,), trainable=False),
        _t(f"{name}.num_batches_tracked", (), "int64", trainable=False),
    )
    variables = ("gamma", "beta", "moving_mean", "moving_variance", "num_batches_tracked")
    return Port(tensors, name, variables, _identity, _identity)


def layernorm(name: str, features: int) -> Port:
    """``nn.LayerNorm`` <-> ``keras.layers.LayerNormalization`` (epsilon set equal by the twin)."""
    tensors = (_t(f"{name}.weight", (features,)), _t(f"{name}.bias", (features,)))
    return Port(tensors, name, ("gamma", "beta"), _identity, _identity)


def rmsnorm(name: str, features: int, layer: str | None = None) -> Port:
    """``zoo.nn.torch.RMSNorm`` (``weight``) <-> ``zoo.nn.keras.RMSNorm`` (``scale``): one vector."""
    return Port((_t(f"{name}.weight", (features,)),), layer or name, ("scale",), _identity, _identity)


def embedding(name: str, num_embeddings: int, features: int) -> Port:
    """``nn.Embedding`` <-> ``keras.layers.Embedding``: the same (N, D) matrix."""
    return Port(
        (_t(f"{name}.weight", (num_embeddings, features)),),
        name,
        ("embeddings",),
        _identity,
        _identity,
        ((0, 1),),
    )


# --------------------------------------------------------------------------- table use


def tensor_specs(table: Sequence[Port]) -> dict[str, TensorSpec]:
    specs: dict[str, TensorSpec] = {}
    for port in table:
        for spec in port.tensors:
            if spec.name in specs:
                raise ValueError(f"weight table names {spec.name!r} twice")
            specs[spec.name] = spec
    return specs


def count_parameters(table: Sequence[Port]) -> int:
    return sum(math.prod(s.shape) for p in table for s in p.tensors if s.trainable)


def keras_layer(model, path: str):
    """Follow an attribute path such as ``stages.0.conv`` from a Keras model to a layer."""
    obj = model
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


# ---------------------------------------------------------------------- weight decay


def decay_exempt_tensors(table: Sequence[Port]) -> set[str]:
    """The trainable tensors ``optimizer.decay_biases_and_norms: false`` leaves undecayed: the
    1-D ones (biases, norm scales and shifts), timm's rule, decided on the canonical layout so
    that both frameworks exempt the same numbers."""
    return {s.name for p in table for s in p.tensors if s.trainable and len(s.shape) <= 1}


def decay_exempt_variables(table: Sequence[Port]) -> list[tuple[str, str]]:
    """(layer path, variable path) of every Keras variable that holds only exempt tensors.

    Found by sending 1 (exempt) and 0 (decayed) through each port's own ``to_keras``: a
    variable made of ones holds exempt tensors only (a Keras recurrent cell's stacked pair of
    biases is one such variable). A variable that mixes both could not be half decayed: refused.
    """
    exempt = decay_exempt_tensors(table)
    found = []
    for port in table:
        probes = [np.full(s.shape, float(s.name in exempt), np.float64) for s in port.tensors]
        for variable, values in zip(port.variables, port.to_keras(*probes), strict=True):
            values = np.asarray(values)
            if values.size and np.all(values == 1):
                found.append((port.layer, variable))
            elif np.any(values != 0):
                raise ValueError(
                    f"{port.layer}.{variable} holds both decayed and exempt tensors; weight decay "
                    "cannot exempt part of one variable"
                )
    return found
