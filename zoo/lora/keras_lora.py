"""LoRA on the Keras twin: the same adapters as ``zoo.lora.torch_lora``, the same arithmetic.

Each adapter is a layer owned by the layer it adapts (a zoo ``Dense``'s ``lora_adapter``, a
fused attention's ``in_proj_delta``), so it is one of the model's variables (saved and restored
with a run's state) and runs under that layer's dtype policy. Its kernels are A and B
transposed (Keras multiplies from the right). The base's variables are set untrainable, one by
one, as Keras' own ``enable_lora`` freezes a kernel.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from zoo.checkpoint.tables import keras_layer
from zoo.lora.adapter import BIAS, A, Adapter, B, EmbeddingPoint
from zoo.nn.keras.linear import Dense
from zoo.recipe.lora_targets import FUSED


class LowRank(layers.Layer):
    """``scale * dropout(x) @ A.T @ B.T``, with kernels ``lora_A`` (in, r) and ``lora_B`` (r, out)."""

    def __init__(
        self, in_features: int, out_features: int, rank: int, scale: float, dropout: float, bias=False, **kw
    ):
        super().__init__(**kw)
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.scale, self.rate = scale, dropout
        self.dropout = layers.Dropout(dropout) if dropout else None
        self.lora_A = self.add_weight(shape=(in_features, rank), initializer="zeros", name="lora_A")
        self.lora_B = self.add_weight(shape=(rank, out_features), initializer="zeros", name="lora_B")
        self.lora_bias = (
            self.add_weight(shape=(out_features,), initializer="zeros", name="lora_bias") if bias else None
        )
        self.built = True

    def call(self, x, training=False):
        if self.dropout is not None:
            x = self.dropout(x, training=training)
        y = ops.matmul(ops.matmul(x, self.lora_A), self.lora_B)
        if self.lora_bias is not None:
            y = y + self.lora_bias
        return y * ops.cast(self.scale, self.compute_dtype)


class EmbeddingLowRank(LowRank):
    """PEFT's ``Embedding`` LoRA on token ids: ``scale * A.T[ids] @ B.T`` (kernel rows looked up)."""

    def call(self, ids, training=False):
        rows = ops.take(self.lora_A, ops.cast(ids, "int32"), axis=0)
        return ops.matmul(rows, self.lora_B) * ops.cast(self.scale, self.compute_dtype)


class FusedDelta(layers.Layer):
    """The q/k/v adapters of one fused projection, concatenated (zeros for a block without one)."""

    def __init__(self, parts: dict[str, LowRank], **kw):
        super().__init__(**kw)
        self.names = tuple(parts)
        for name, module in parts.items():  # attributes q, k, v: the weight table's paths
            setattr(self, name, module)
        self.built = True

    def call(self, x, training=False):
        outputs = {name: getattr(self, name)(x, training=training) for name in self.names}
        like = next(iter(outputs.values()))
        return ops.concatenate([outputs.get(name, ops.zeros_like(like)) for name in FUSED], axis=-1)


def _set(layer, attribute: str, value) -> None:
    """Add a sub-layer to a built layer (Keras locks a layer's state once built)."""
    layer._tracker.unlock()
    setattr(layer, attribute, value)
    layer._tracker.lock()


def attach(model, family, adapter: Adapter, tensors: dict[str, np.ndarray], bias_names: list[str]) -> None:
    """Freeze ``model``'s variables, attach the adapters holding ``tensors`` (canonical layout),
    and let ``bias_names`` (canonical names) train with them."""
    for variable in model.variables:
        variable.trainable = False
    fused: dict[str, dict[str, LowRank]] = {}
    for point in adapter.points:
        host = keras_layer(model, point.layer)
        embedding = isinstance(point, EmbeddingPoint)
        module = (EmbeddingLowRank if embedding else LowRank)(
            point.in_features,
            point.out_features,
            adapter.ranks[point.name],
            adapter.scales[point.name],
            0.0 if embedding else adapter.dropout,
            adapter.biased(point),
            dtype=host.dtype_policy,
            name=f"lora_{point.name.replace('.', '_')}",
        )
        module.lora_A.assign(np.ascontiguousarray(tensors[f"{point.name}.{A}"].T))
        module.lora_B.assign(np.ascontiguousarray(tensors[f"{point.name}.{B}"].T))
        if module.lora_bias is not None:
            module.lora_bias.assign(np.asarray(tensors[f"{point.name}.{BIAS}"]))
        if embedding:
            _add_to_lookup(host, module)
        elif point.fused:
            fused.setdefault(point.layer, {})[point.name.rsplit(".", 1)[1]] = module
        elif isinstance(host, Dense):
            _set(host, "lora_adapter", module)
        else:
            raise TypeError(
                f"{point.layer} is a {type(host).__name__}, not zoo's Dense: LoRA cannot adapt it"
            )
    for path, parts in fused.items():
        host = keras_layer(model, path)
        _set(host, "in_proj_delta", FusedDelta(parts, dtype=host.dtype_policy))
    for variable in bias_variables(model, family, bias_names).values():
        variable.trainable = True


def _add_to_lookup(host, module: EmbeddingLowRank) -> None:
    """An embedding layer whose lookup adds ``module``'s output: zoo's Embedding has no adapter
    slot, so this instance's ``call`` is wrapped (a tied head reads the table itself, unadapted,
    as under PEFT)."""
    _set(host, "lora_adapter", module)
    lookup = host.call

    def call(inputs, *args, **kwargs):
        return lookup(inputs, *args, **kwargs) + module(inputs)

    object.__setattr__(host, "call", call)


def bias_variables(model, family, names: list[str]) -> dict:
    """The Keras variables of canonical bias tensors, by name (one tensor, one variable, in every
    port that holds a bias)."""
    wanted, found = set(names), {}
    for port in family.weight_table(model.zoo_config):
        layer = keras_layer(model, port.layer)
        for spec, variable in zip(port.tensors, port.variables, strict=False):
            if spec.name in wanted:
                found[spec.name] = keras_layer(layer, variable)
    return found


def adapter_tensors(model, family, adapter: Adapter, bias_names: list[str]) -> dict[str, np.ndarray]:
    """A and B in the canonical layout by point name, and the trained biases by canonical name."""
    out = {}
    for point in adapter.points:
        module = _module(model, point)
        out[f"{point.name}.{A}"] = np.ascontiguousarray(keras.ops.convert_to_numpy(module.lora_A).T)
        out[f"{point.name}.{B}"] = np.ascontiguousarray(keras.ops.convert_to_numpy(module.lora_B).T)
        if module.lora_bias is not None:
            out[f"{point.name}.{BIAS}"] = np.asarray(keras.ops.convert_to_numpy(module.lora_bias), np.float32)
    variables = bias_variables(model, family, bias_names)
    for name in bias_names:
        out[name] = np.asarray(keras.ops.convert_to_numpy(variables[name]), np.float32)
    return out


def _module(model, point) -> LowRank:
    host = keras_layer(model, point.layer)
    if point.fused:
        return getattr(host.in_proj_delta, point.name.rsplit(".", 1)[1])
    return host.lora_adapter
