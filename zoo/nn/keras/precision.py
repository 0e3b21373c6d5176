"""Building a Keras twin under a recipe's precision (its Keras policy: ``zoo.precision``).

Mixed precision means one thing in both frameworks (docs/precision.md): the matrix
products (dense and convolution layers, attention's products, recurrent cells) take
low-precision inputs and weights and give low-precision outputs; everything else
(normalisation, softmax, residual sums, embeddings, the loss) runs in float32. That is
what torch's autocast does to zoo's torch twins. Keras' global ``mixed_bfloat16`` policy
would round every layer's output instead, residual stream and norms included: its
gradients were 8x further from its own float32 than torch's on a transformer.

So a mixed twin is built under ``float32`` and only its product layers get the mixed
policy. A family marks its own product layers (a recurrent cell, an attention block)
with ``low_precision_products = True``; Keras' dense and convolution layers are known.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
from keras import layers

from zoo.checkpoint.tensors import load_tensors
from zoo.family import ArchitectureConfig, Family
from zoo.precision import PRECISIONS


@contextlib.contextmanager
def dtype_policy(precision: str) -> Iterator[None]:
    """Build layers under the recipe's global dtype policy without leaking it to later
    models. Mixed precisions build under float32: :func:`apply_mixed` lowers the products."""
    meaning = PRECISIONS[precision]
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32" if meaning.mixed else meaning.keras_policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def product_layers(model: Any) -> list[Any]:
    """The layers whose work is a matrix product: Keras' dense and convolution layers and
    every layer a family marks with ``low_precision_products``."""
    known = (
        layers.Dense, layers.EinsumDense, layers.Conv1D, layers.Conv2D, layers.Conv3D,
        layers.Conv1DTranspose, layers.Conv2DTranspose, layers.Conv3DTranspose,
        layers.DepthwiseConv1D, layers.DepthwiseConv2D, layers.SeparableConv1D, layers.SeparableConv2D,
    )  # fmt: skip
    return [
        layer
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, known) or getattr(layer, "low_precision_products", False)
    ]


def apply_mixed(model: Any, precision: str) -> Any:
    """Give the product layers of a twin built under float32 the mixed policy."""
    meaning = PRECISIONS[precision]
    if meaning.mixed:
        for layer in product_layers(model):
            layer.dtype_policy = meaning.keras_policy
    return model


def build_keras(
    family: Family,
    config: ArchitectureConfig,
    precision: str,
    tensors: dict[str, np.ndarray] | None = None,
) -> Any:
    """A Keras twin under ``precision``, holding ``tensors`` (canonical layout) if given."""
    with dtype_policy(precision):
        model = family.build_keras(config)
    apply_mixed(model, precision)
    if tensors is not None:
        load_tensors(model, tensors)
    return model
