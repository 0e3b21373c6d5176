"""Random-config parity: for every registered family, Hypothesis draws configs from the
family's own pydantic config class, fills every tensor of one twin with random non-zero
values, carries them to the other twin through the weight table, and checks outputs
(eval and train mode), gradients and the state after a training-mode pass.

Nothing here names a family: configs are generated from the config classes' field types
and bounds, so a new family is tested as soon as it is registered. Two directions:

- torch -> Keras: every tensor of the torch twin's ``state_dict`` is randomised (biases,
  norm weights, BatchNorm statistics and ``num_batches_tracked`` included), copied into
  a Keras twin through the table; outputs, gradients of ``sum(outputs * W)`` (W fixed and
  random) mapped back through the table, and the state after the training pass agree.
- Keras -> torch: every Keras variable the table reads (and any float variable it does
  not) is randomised, exported through the table and loaded into a torch twin with
  ``strict=True``; the same checks.

Tolerances (float32 twins): outputs and states within ``FORWARD`` times their scale
(max(1, max |torch value|)), or within ``NOISE`` times torch's own float32 error of them (a
deep stack of BatchNorms over a few values per channel in train mode amplifies rounding
beyond any fixed bound, in torch as in Keras); each gradient within ``GRADIENT`` of its own max |value|, or
within ``NOISE`` times torch's own float32 error of it (measured against a float64 copy of
the torch twin), or within ``ROUNDING`` of the model's largest gradient. A gradient that is
zero or nearly so (a BatchNorm bias before another BatchNorm, anything behind a LayerNorm
of two features) is the cancellation of far larger terms; their rounding is all there is
of it, and torch may round it to exactly 0 where Keras leaves 1e-10.

Inputs: a batch of 1..7 samples; for sequence and token inputs a sequence length of
1..8 (at most the config's ``max_len`` where it has one); image sizes are config fields.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

import annotated_types as at
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from zoo import registry
from zoo.checkpoint import load_tensors
from zoo.family import ArchitectureConfig, Family
from zoo.keras.data import keras_layout
from zoo.nn.errors import input_error
from zoo.weights import keras_layer, keras_to_tensors, tensor_specs

FORWARD = 1e-5  # outputs and states, relative to max(1, their largest magnitude)
GRADIENT = 1e-4  # each gradient tensor, relative to its largest magnitude ...
NOISE = 10.0  # ... or within this many times torch's own float32 error of it (vs float64) ...
ROUNDING = 1e-6  # ... or within this fraction of the model's largest gradient
KINK = 1e-6  # a ReLU input this close to 0 (relative to its largest) may change sides in float32
# Random configs per family (each checked in both directions), besides the explicit edge
# cases; ZOO_PARITY_EXAMPLES=200 makes a thorough run.
EXAMPLES = int(os.environ.get("ZOO_PARITY_EXAMPLES", "10"))
SMALL = 8  # integer fields are drawn from [lower bound, lower bound + SMALL - 1] ...
REPEATS = 3  # ... and fields that repeat layers from [lower bound, lower bound + REPEATS - 1]
MAX_BATCH = 7
MAX_STEPS = 8
SMALL_IMAGE = 16
NOT_DRAWN = ("architecture", "preset")

FAMILIES = list(registry.families())


@dataclass(frozen=True)
class Case:
    """One drawn example: the config fields that differ from the defaults, and the input."""

    fields: dict[str, Any]
    batch: int
    steps: int | None  # sequence length; None where the config fixes the sample shape
    seed: int


# ----------------------------------------------------------------- configs from types


def _bounds(metadata: list[Any]) -> tuple[float | None, float | None, bool, bool]:
    """(low, high, low exclusive, high exclusive) from annotated_types constraints."""
    low = high = None
    low_open = high_open = False
    for item in metadata:
        if isinstance(item, at.Ge):
            low, low_open = item.ge, False
        elif isinstance(item, at.Gt):
            low, low_open = item.gt, True
        elif isinstance(item, at.Le):
            high, high_open = item.le, False
        elif isinstance(item, at.Lt):
            high, high_open = item.lt, True
    return low, high, low_open, high_open


def _int_range(metadata: list[Any]) -> tuple[int, int | None]:
    low, high, low_open, high_open = _bounds(metadata)
    lo = 0 if low is None else math.floor(low) + 1 if low_open else math.ceil(low)
    hi = None if high is None else math.ceil(high) - 1 if high_open else math.floor(high)
    return lo, hi


def _integers(lo: int, hi: int, pool: tuple[int, ...]) -> st.SearchStrategy:
    """Integers in [lo, hi], often one of the example's ``pool`` of shared sizes: shape bugs
    hide where two sizes coincide (one feature per head and as many steps as heads)."""
    shared = sorted({v for v in pool if lo <= v <= hi})
    own = st.integers(lo, hi)
    return st.one_of(st.sampled_from(shared), own) if shared else own


def _strategy(
    name: str,
    annotation: Any,
    metadata: list[Any],
    default: Any,
    small: int = SMALL,
    pool: tuple[int, ...] = (),
) -> st.SearchStrategy:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _strategy(name, inner, [*metadata, *extra], default, small, pool)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(
            *(
                st.none() if arg is type(None) else _strategy(name, arg, metadata, default, small, pool)
                for arg in typing.get_args(annotation)
            )
        )
    if origin is Literal:
        return st.sampled_from(typing.get_args(annotation))
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        lo, hi = _int_range(metadata)
        top = lo + small - 1 if hi is None else min(hi, lo + small - 1)
        drawn = _integers(lo, top, pool)
        # A larger default (a max_len, a width) is what some combinations need to validate;
        # an ImageNet-sized image (224) is capped: 16x16 validates what 224 does, at 1/196 the cost.
        if name == "image_size" and isinstance(default, int):
            default = min(default, SMALL_IMAGE)
        if isinstance(default, int) and default > top:
            return st.one_of(drawn, st.just(default))
        return drawn
    if annotation is float:
        if "dropout" in name:  # train-mode outputs are only comparable without dropout
            return st.just(0.0)
        low, high, low_open, high_open = _bounds(metadata)
        lo = max(0.0 if low is None else float(low), 1e-5)  # a float32 epsilon must not round to 0
        hi = lo + 1.0 if high is None else min(float(high), lo + 1.0)
        return st.floats(lo, hi, exclude_min=low_open and lo == low, exclude_max=high_open and hi == high)
    if origin is list:
        (item,) = typing.get_args(annotation)
        shortest = max([1, *(n.min_length for n in metadata if isinstance(n, at.MinLen))])
        longest = min([shortest + 2, *(n.max_length for n in metadata if isinstance(n, at.MaxLen))])
        items = _strategy(name, item, [], None, small, pool)
        return st.lists(items, min_size=shortest, max_size=longest)
    raise TypeError(
        f"config field {name!r} has type {annotation!r}, which this test cannot draw; "
        "teach _strategy() the type"
    )


def _drawable(config_class: type[ArchitectureConfig]) -> dict[str, FieldInfo]:
    return {k: v for k, v in config_class.model_fields.items() if k not in NOT_DRAWN}


def repeat_fields(family: Family) -> frozenset[str]:
    return _repeat_fields(family.name)


@functools.cache
def _repeat_fields(name: str) -> frozenset[str]:
    """Integer fields (and lists of integers) that change how many tensors the model has (a
    layer count, blocks per stage), not their shapes. Building a Keras layer costs far more
    than widening one, and a third layer finds little that a second does not, so these stay
    small."""
    family = registry.families()[name]
    default = family.config.model_validate({"architecture": family.name})
    tensors = len(tensor_specs(family.weight_table(default)))
    found = set()
    for key, info in _drawable(family.config).items():
        value = getattr(default, key)
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            others = [[v + step, *value[1:]] for v in value[:1] for step in (1, 2, -1)]  # blocks per stage
        elif info.annotation is int:
            others = [value + 1, value + 2, value - 1]
        else:
            continue
        for other in others:
            config = _validate(family, {**_changed(default), key: other})
            if config is not None:
                if len(tensor_specs(family.weight_table(config))) != tensors:
                    found.add(key)
                break
    return frozenset(found)


def _validate(family: Family, fields: dict[str, Any]) -> ArchitectureConfig | None:
    try:
        return family.config.model_validate({**fields, "architecture": family.name})
    except ValidationError:
        return None


def _changed(config: ArchitectureConfig) -> dict[str, Any]:
    """The fields of ``config`` that differ from the defaults (what a failure report shows)."""
    return {
        k: getattr(config, k)
        for k, info in _drawable(type(config)).items()
        if getattr(config, k) != info.get_default(call_default_factory=True)
    }


def _longest_steps(config: ArchitectureConfig) -> int:
    return min(MAX_STEPS, getattr(config, "max_len", MAX_STEPS))


@st.composite
def cases(draw, family: Family) -> Case:
    pool = tuple(draw(st.lists(st.integers(1, SMALL), min_size=1, max_size=2)))
    repeats = repeat_fields(family)
    fields = {}
    for k, info in _drawable(family.config).items():
        small = REPEATS if k in repeats else SMALL
        fields[k] = draw(_strategy(k, info.annotation, list(info.metadata), info.default, small, pool))
    config = _validate(family, fields)
    assume(config is not None)
    batch = draw(_integers(1, MAX_BATCH, pool))
    steps = None if family.input_kind == "image" else draw(_integers(1, _longest_steps(config), pool))
    return Case(_changed(config), batch, steps, draw(st.integers(0, 2**31 - 1)))


# ------------------------------------------------------------------- explicit examples


def _dropout_off(family: Family) -> dict[str, float]:
    return {k: 0.0 for k in _drawable(family.config) if "dropout" in k}


def _sized(family: Family, size: int, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with every integer field (and integer list) at ``size`` (a layer count at
    most 2), clamped into its bounds. Where that does not validate, the first field whose
    default makes it valid keeps its default; failing that, fields are set to ``size`` one
    by one wherever the config still validates."""
    sizable = {}
    for name, info in _drawable(family.config).items():
        value = _sized_value(
            info.annotation, list(info.metadata), min(size, 2) if name in repeat_fields(family) else size
        )
        if name not in base and value is not None:
            sizable[name] = value
    fields = {**base, **sizable}
    if _validate(family, fields) is not None:
        return fields
    for name in sizable:
        fewer = {k: v for k, v in fields.items() if k != name}
        if _validate(family, fewer) is not None:
            return fewer
    fields = dict(base)
    for name, value in sizable.items():
        if _validate(family, {**fields, name: value}) is not None:
            fields[name] = value
    return fields


def _sized_value(annotation: Any, metadata: list[Any], size: int) -> Any:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _sized_value(inner, [*metadata, *extra], size)
    if origin in (typing.Union, types.UnionType):
        values = (_sized_value(a, metadata, size) for a in typing.get_args(annotation))
        return next((v for v in values if v is not None), None)
    if annotation is int:
        lo, hi = _int_range(metadata)
        return max(lo, size) if hi is None else min(hi, max(lo, size))
    if origin is list:
        item = _sized_value(typing.get_args(annotation)[0], [], size)
        return None if item is None else [item]
    return None


def _task_variants(family: Family) -> list[dict[str, Any]]:
    """One dict per value of each Literal field the data decides (a task), else one empty dict."""
    variants: list[dict[str, Any]] = [{}]
    for name in family.config.DATA_FIELDS:
        annotation = family.config.model_fields[name].annotation
        if typing.get_origin(annotation) is Literal:
            variants = [{**v, name: value} for v in variants for value in typing.get_args(annotation)]
    return variants


def edge_cases(family: Family) -> list[Case]:
    """For every task: sizes 1 and 7 everywhere (fields, batch, sequence length); and, for
    configs with a model width and a head count, one feature per head with as many steps as
    heads, unless size 7 already gives exactly that."""
    found = []
    heads = {"d_model", "num_heads"} <= set(family.config.model_fields) and family.input_kind != "image"
    for task in _task_variants(family):
        base = {**_dropout_off(family), **task}
        covered = False
        for size in (1, 7):
            config = _validate(family, _sized(family, size, base))
            if config is None:
                continue
            steps = None if family.input_kind == "image" else min(size, _longest_steps(config))
            found.append(Case(_changed(config), size, steps, size))
            covered |= heads and config.d_model == config.num_heads == steps
        if heads and not covered:
            config = _validate(family, {**base, "d_model": 4, "num_heads": 4})
            if config is not None:
                found.append(Case(_changed(config), 3, min(4, _longest_steps(config)), 4))
    return found


# ------------------------------------------------------------------------ random values


def randomised(value: np.ndarray, trainable: bool, rng: np.random.Generator) -> np.ndarray:
    """Random values of ``value``'s shape and dtype that nothing leaves trivial.

    Integers (a batch counter) become 1..999. A non-trainable statistic that is positive (a
    running variance) stays positive. Anything else gets normal values: at the scale it
    has (at least 0.1), or N(0, 0.5) where it is constant (a zero bias, a unit norm weight).
    """
    if not np.issubdtype(value.dtype, np.floating):
        return rng.integers(1, 1000, size=value.shape).astype(value.dtype)
    start = value.astype(np.float64)
    if not trainable and start.size and np.all(start > 0):
        return rng.uniform(0.25, 2.0, size=value.shape).astype(value.dtype)
    constant = start.size < 2 or float(np.ptp(start)) == 0.0
    scale = 0.5 if constant else max(float(np.sqrt(np.mean(start**2))), 0.1)
    return (rng.normal(size=value.shape) * scale).astype(value.dtype)


def randomise_torch(model, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every tensor of the torch twin's ``state_dict``, parameters and buffers alike."""
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    state = {k: randomised(v.detach().numpy(), k in trainable, rng) for k, v in model.state_dict().items()}
    load_tensors(model, state)
    return state


def randomise_keras(model, table, rng: np.random.Generator) -> None:
    """Every variable the table reads, and every float variable it does not (those must not
    change the outputs: if they do, the comparison shows it). Seed-generator states, the
    only integer variables outside the table, stay as they are."""
    read = set()
    for port in table:
        layer = keras_layer(model, port.layer)
        read.update(id(keras_layer(layer, v)) for v in port.variables)
    for variable in model.variables:
        value = np.asarray(variable.numpy())
        if id(variable) in read or np.issubdtype(value.dtype, np.floating):
            variable.assign(randomised(value, variable.trainable, rng))


# ------------------------------------------------------------------------------ passes


def make_input(config: ArchitectureConfig, case: Case) -> np.ndarray:
    """The config's own example batch; a sequence cut (or extended) to ``case.steps``."""
    x = config.example_input(case.batch, seed=case.seed)
    if case.steps is None:
        return x
    pieces = [x]
    while sum(p.shape[1] for p in pieces) < case.steps:
        pieces.append(config.example_input(case.batch, seed=case.seed + len(pieces)))
    return np.ascontiguousarray(np.concatenate(pieces, axis=1)[:, : case.steps])


@dataclass
class Pass:
    """One twin's outputs on a batch; what a training pass gives, unless it was refused."""

    eval: np.ndarray
    refused: str | None = None  # the InputError message of a refused training pass
    train: np.ndarray | None = None
    gradients: dict[str, np.ndarray] = field(default_factory=dict)  # canonical names and layouts
    state: dict[str, np.ndarray] = field(default_factory=dict)  # every tensor after training
    noise: dict[str, float] = field(default_factory=dict)  # torch: |float32 - float64| gradient
    # torch: |float32 - float64| of the eval and train outputs and of every tensor after training
    output_noise: dict[str, float] = field(default_factory=dict)
    kink: str | None = None  # torch: a ReLU input that float32 rounding can push across zero


def _refusal(error: Exception) -> str:
    """The message of an input a twin refuses (zoo's InputError); anything else is re-raised."""
    refused = input_error(error)
    if refused is None:
        raise error
    return str(refused)


def torch_pass(model, x: np.ndarray, weights_rng: np.random.Generator) -> tuple[Pass, np.ndarray]:
    """Eval-mode outputs, then one training pass: outputs, gradients of ``sum(outputs * W)``
    (W drawn here, returned for the Keras twin) and the state the pass leaves. The same
    training pass of a float64 copy measures torch's own float32 error of each gradient."""
    inputs = torch.from_numpy(x)
    model.eval()
    with torch.no_grad():
        result = Pass(model(inputs).numpy())
    weights = weights_rng.normal(size=result.eval.shape).astype(np.float32)
    exact = copy.deepcopy(model).double()
    try:
        result.train, result.gradients = _torch_train(model, inputs, weights)
    except Exception as error:
        result.refused = _refusal(error)
        return result, weights
    result.state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    exact_inputs = inputs.double() if inputs.is_floating_point() else inputs
    exact.eval()
    with torch.no_grad():
        result.output_noise["eval"] = _gap(result.eval, exact(exact_inputs).numpy())
    with _kinks(exact) as kinks:
        exact_train, exact_gradients = _torch_train(exact, exact_inputs, weights)
    result.kink = kinks[0] if kinks else None
    result.output_noise["train"] = _gap(result.train, exact_train)
    result.noise = {k: _gap(g, exact_gradients[k]) for k, g in result.gradients.items()}
    exact_state = exact.state_dict()
    result.output_noise |= {k: _gap(v, exact_state[k].numpy()) for k, v in result.state.items()}
    return result, weights


@contextlib.contextmanager
def _kinks(model):
    """Names of the ReLUs (in a float64 model) that get an input within float32 rounding of 0.

    The gradient of ReLU jumps there: where float32 puts such an input on the other side of
    zero in one framework than in the other (1 value in 38,416 of a ResNet does it), every
    gradient before it differs by far more than rounding, while outputs still agree."""
    found: list[str] = []

    def look(name):
        def hook(module, args):
            x = args[0].detach().abs()
            near = (x > 0) & (x < KINK * x.max())
            if bool(near.any()) and name not in found:
                found.append(f"{name} ({int(near.sum())} of {x.numel()} inputs within {KINK} of its scale)")

        return hook

    handles = [
        module.register_forward_pre_hook(look(name))
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ReLU)
    ]
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def _torch_train(model, inputs, weights: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    model.train()
    model.zero_grad(set_to_none=True)
    trained = model(inputs)
    (trained * torch.from_numpy(weights).to(trained.dtype)).sum().backward()
    gradients = {
        name: np.zeros(tuple(p.shape), np.float32) if p.grad is None else p.grad.numpy().copy()
        for name, p in model.named_parameters()
    }
    return trained.detach().numpy(), gradients


def keras_pass(model, table, x: np.ndarray, family: Family, weights: np.ndarray) -> Pass:
    """The same on the Keras twin; gradients and state mapped to canonical tensors by ``table``."""
    import tensorflow as tf

    inputs = keras_layout(x, family.input_kind)
    result = Pass(np.asarray(model(inputs, training=False)))
    ports = []
    for port in table:
        layer = keras_layer(model, port.layer)
        ports.append((port, [keras_layer(layer, v) for v in port.variables]))
    trainable = [v for _, variables in ports for v in variables if v.trainable]
    try:
        with tf.GradientTape() as tape:
            trained = model(inputs, training=True)
            loss = tf.reduce_sum(tf.cast(trained, tf.float32) * weights)
    except Exception as error:
        result.refused = _refusal(error)
        return result
    found = dict(zip(map(id, trainable), tape.gradient(loss, trainable), strict=True))
    for port, variables in ports:
        arrays = []
        for variable in variables:
            gradient = found.get(id(variable))
            if not variable.trainable:  # its value only keeps to_torch's shapes right
                arrays.append(np.asarray(variable.numpy()))
            elif gradient is None:  # off the loss path: torch leaves such a gradient at zero
                arrays.append(np.zeros(tuple(variable.shape), np.float32))
            else:  # an Embedding's IndexedSlices become a dense array
                arrays.append(np.asarray(tf.convert_to_tensor(gradient)))
        for spec, array in zip(port.tensors, port.to_torch(*arrays), strict=True):
            if spec.trainable:
                result.gradients[spec.name] = np.asarray(array)
    result.train = np.asarray(trained)
    result.state = keras_to_tensors(model, table)
    return result


# ----------------------------------------------------------------------------- checks


def _gap(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def _scale(a: np.ndarray) -> float:
    return max(1.0, float(np.max(np.abs(a)))) if np.size(a) else 1.0


def differences(torch_side: Pass, keras_side: Pass) -> list[str]:
    """What differs between the twins' passes, one line per output, gradient or tensor."""
    problems = []
    if torch_side.refused != keras_side.refused:
        problems.append(
            f"training pass: torch {_refused(torch_side.refused)}, Keras {_refused(keras_side.refused)}"
        )
    modes = [("eval", torch_side.eval, keras_side.eval)]
    if torch_side.refused is None and keras_side.refused is None:
        modes.append(("train", torch_side.train, keras_side.train))
    for mode, a, b in modes:
        noise = torch_side.output_noise.get(mode, 0.0)
        if _gap(a, b) > max(FORWARD * _scale(a), NOISE * noise):
            problems.append(
                f"{mode}-mode outputs {list(np.shape(a))} vs {list(np.shape(b))}: max |diff| "
                f"{_gap(a, b):.3g} > max({FORWARD} * {_scale(a):.3g}, {NOISE} * {noise:.3g}) (their "
                "scale, torch's float32 error)"
            )
    if len(modes) == 1:
        return problems
    largest = max((float(np.max(np.abs(g))) for g in torch_side.gradients.values() if g.size), default=0.0)
    compared = {} if torch_side.kink is not None else torch_side.gradients  # a kink: see _kinks
    for name, expected in compared.items():
        got = keras_side.gradients.get(name)
        if got is None:
            problems.append(f"gradient of {name}: the weight table gives the Keras twin none")
            continue
        own = float(np.max(np.abs(expected))) if expected.size else 0.0
        noise = torch_side.noise[name]
        if _gap(expected, got) > max(GRADIENT * own, NOISE * noise, ROUNDING * largest):
            problems.append(
                f"gradient of {name}: max |diff| {_gap(expected, got):.3g} > max({GRADIENT} * {own:.3g}, "
                f"{NOISE} * {noise:.3g}, {ROUNDING} * {largest:.3g}) (its scale, torch's float32 "
                "error, the largest gradient)"
            )
    for name, expected in torch_side.state.items():
        allowed = max(FORWARD * _scale(expected), NOISE * torch_side.output_noise.get(name, 0.0))
        if _gap(expected, keras_side.state[name]) > allowed:
            problems.append(
                f"{name} after the training pass: max |diff| {_gap(expected, keras_side.state[name]):.3g}"
            )
    return problems


def _refused(message: str | None) -> str:
    return "trained" if message is None else f"refused ({message})"


def check(family: Family, case: Case) -> None:
    """Both directions on one pair of twins: torch -> Keras, then Keras -> torch."""
    config = family.config.model_validate({**case.fields, "architecture": family.name})
    table = family.weight_table(config)
    rng = np.random.default_rng(case.seed)
    torch.manual_seed(case.seed)
    torch_model = family.build_torch(config)
    keras_model = family.build_keras(config)
    x = make_input(config, case)

    state = randomise_torch(torch_model, rng)
    load_tensors(keras_model, state)
    back = keras_to_tensors(keras_model, table)
    changed = [name for name, value in state.items() if _gap(value, back[name]) != 0.0]
    assert not changed, f"torch -> Keras: tensors read back from Keras changed: {changed}"
    _compare(family, table, torch_model, keras_model, x, rng, "torch -> Keras")

    randomise_keras(keras_model, table, rng)
    state = keras_to_tensors(keras_model, table)
    assert list(state) == list(tensor_specs(table))
    load_tensors(torch_model, state)  # strict: every name, every shape
    _compare(family, table, torch_model, keras_model, x, rng, "Keras -> torch")


def _compare(family, table, torch_model, keras_model, x, rng, direction: str) -> None:
    torch_side, weights = torch_pass(torch_model, x, rng)
    keras_side = keras_pass(keras_model, table, x, family, weights)
    problems = differences(torch_side, keras_side)
    assert not problems, f"{direction}: the twins differ:\n  " + "\n  ".join(problems)


def parity_property(family: Family):
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(case=cases(family))
    def random_config_parity(case: Case) -> None:
        check(family, case)

    for case in edge_cases(family):
        random_config_parity = example(case=case)(random_config_parity)
    return random_config_parity


# A sequence of one step gives attention a softmax over one key, about which Keras warns.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1:UserWarning")
@pytest.mark.parametrize("name", FAMILIES)
def test_random_config_parity(name):
    """Both directions, on every explicit edge case and EXAMPLES random configs of the family."""
    parity_property(registry.families()[name])()
