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
of it, and torch may round it to exactly 0 where Keras leaves 1e-10. Where a model convolves,
``NOISE`` grows by ``ONEDNN_CONV``: TensorFlow's oneDNN convolutions round more than torch's.

Torch's float32 error is one draw of rounding, and where a config is ill-conditioned (BERT
with weights of standard deviation 1 and a LayerNorm epsilon of 1/16: gradients summed from
terms 13x their size) Keras' draw was 12x torch's. So a float32 gradient gap over those
bounds is looked at again in float64: if the float64 twins agree (``FLOAT64_AGREE`` of the
largest gradient: they compute the same function) and that gradient's float32 gap is within
``FLOAT32_ROUNDING`` of the largest gradient, it is rounding, not a difference. Where a config
is chaotic (a Llama of 30 layers with weights of standard deviation 1), a rounding-sized change
anywhere moves the gradients by far more than that: the float32 gap is then held to ``NOISE``
times the spread that such a change gives, measured on the float64 torch twin whose weights are
each moved by float32's rounding (``PERTURBATIONS`` draws). There, torch's own float32 error of
a gradient was 2.3 and Keras' gap 26.7, while the draws moved it by 8 to 61. Outputs over
``FORWARD`` get the same second look (float64 outputs in agreement, the float32 gap within
``NOISE`` times that spread): a three-layer Llama with Qwen3's norms, biases everywhere and an
RMSNorm epsilon of 0.005 had torch's float32 error of its logits at 8.0e-6 and Keras' at 1.9e-4
(2.1e-5 of their scale), its float64 twins 3e-13 apart.

Inputs: a batch of 1..7 samples; for sequence and token inputs a sequence length of
1..8 (at most the config's ``max_len`` where it has one); image sizes are config fields.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from conftest import max_diff
from hypothesis import HealthCheck, example, given, settings
from random_configs import (
    EXAMPLES,
    FAMILIES,
    Case,
    cases,
    edge_cases,
)

from zoo import registry
from zoo.checkpoint.keras_variables import keras_to_tensors
from zoo.checkpoint.tables import keras_layer, tensor_specs
from zoo.checkpoint.tensors import load_tensors
from zoo.family import ArchitectureConfig, Family
from zoo.keras.data import keras_layout
from zoo.keras.onednn import onednn_enabled
from zoo.nn.errors import input_error

FORWARD = 1e-5  # outputs and states, relative to max(1, their largest magnitude)
GRADIENT = 1e-4  # each gradient tensor, relative to its largest magnitude ...
NOISE = 10.0  # ... or within this many times torch's own float32 error of it (vs float64) ...
ROUNDING = 1e-6  # ... or within this fraction of the model's largest gradient
FLOAT64_AGREE = 1e-8  # measured 2e-9 on that BERT (its float32 attention scale apart: exact)
FLOAT32_ROUNDING = 1e-5  # measured 7.8e-6 there; a 1% wrong bias gives 1e-2 relative
PERTURBATIONS = 3  # float64 passes with every weight moved by float32's relative rounding
OUTPUT_PROBLEMS = ("eval-mode outputs", "train-mode outputs")  # how differences() words them
FLOAT32_EPS = 2.0**-24
KINK = 1e-6  # a ReLU input this close to 0 (relative to its largest) may change sides in float32
# TensorFlow's oneDNN convolutions round ~4.5x more than torch's (8.6e-7 vs
# 1.9e-7 relative to float64 on a 3x3 conv; docs/float32-relu-crossings.md), so where a model
# convolves, the Keras twin's own float32 error is up to that much larger than torch's: measured on
# resnet (7x7 images, train-mode BatchNorm over 7 values per channel) at 10.2x torch's error with
# oneDNN on and 2.6x with it off. Whether it is on is TensorFlow's choice per CPU when the
# variable is unset (zoo.keras.onednn): asked of TensorFlow, not guessed from the variable.
ONEDNN_CONV = 4.5 if onednn_enabled() else 1.0


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
    exact_gradients: dict[str, np.ndarray] = field(default_factory=dict)  # torch: the float64 ones
    exact_outputs: dict[str, np.ndarray] = field(default_factory=dict)  # torch: float64 eval, train
    start: torch.nn.Module | None = None  # torch: a float64 copy before any training pass
    # torch: |float32 - float64| of the eval and train outputs and of every tensor after training
    output_noise: dict[str, float] = field(default_factory=dict)
    kink: str | None = None  # torch: a ReLU input that float32 rounding can push across zero
    convolves: bool = False  # torch: the model has a convolution (see ONEDNN_CONV)


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
    result.convolves = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in model.modules())
    weights = weights_rng.normal(size=result.eval.shape).astype(np.float32)
    result.start = copy.deepcopy(model).double()
    exact = copy.deepcopy(result.start)
    try:
        result.train, result.gradients = _torch_train(model, inputs, weights)
    except Exception as error:
        result.refused = _refusal(error)
        return result, weights
    result.state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    exact_inputs = inputs.double() if inputs.is_floating_point() else inputs
    exact.eval()
    with torch.no_grad():
        result.exact_outputs["eval"] = exact(exact_inputs).numpy()
    result.output_noise["eval"] = _gap(result.eval, result.exact_outputs["eval"])
    with _kinks(exact) as kinks:
        exact_train, exact_gradients = _torch_train(exact, exact_inputs, weights)
    result.kink = kinks[0] if kinks else None
    result.exact_outputs["train"] = exact_train
    result.output_noise["train"] = _gap(result.train, exact_train)
    result.noise = {k: _gap(g, exact_gradients[k]) for k, g in result.gradients.items()}
    result.exact_gradients = exact_gradients
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
    """max |a - b| (conftest.max_diff: no float64 copies of the inputs), inf where the shapes
    differ: called for every tensor of every drawn config."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return math.inf
    return max_diff(a, b) if a.size else 0.0


def _scale(a: np.ndarray) -> float:
    return max(1.0, float(np.max(np.abs(a)))) if np.size(a) else 1.0


def differences(torch_side: Pass, keras_side: Pass) -> list[str]:
    """What differs between the twins' passes, one line per output, gradient or tensor."""
    problems = []
    noise_times = NOISE * (ONEDNN_CONV if torch_side.convolves else 1.0)
    if torch_side.refused != keras_side.refused:
        problems.append(
            f"training pass: torch {_refused(torch_side.refused)}, Keras {_refused(keras_side.refused)}"
        )
    modes = [("eval", torch_side.eval, keras_side.eval)]
    if torch_side.refused is None and keras_side.refused is None:
        modes.append(("train", torch_side.train, keras_side.train))
    for mode, a, b in modes:
        noise = torch_side.output_noise.get(mode, 0.0)
        if _gap(a, b) > max(FORWARD * _scale(a), noise_times * noise):
            problems.append(
                f"{mode}-mode outputs {list(np.shape(a))} vs {list(np.shape(b))}: max |diff| "
                f"{_gap(a, b):.3g} > max({FORWARD} * {_scale(a):.3g}, {noise_times} * {noise:.3g}) (their "
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
        if _gap(expected, got) > max(GRADIENT * own, noise_times * noise, ROUNDING * largest):
            problems.append(
                f"gradient of {name}: max |diff| {_gap(expected, got):.3g} > max({GRADIENT} * {own:.3g}, "
                f"{noise_times} * {noise:.3g}, {ROUNDING} * {largest:.3g}) (its scale, torch's float32 "
                "error, the largest gradient)"
            )
    for name, expected in torch_side.state.items():
        allowed = max(FORWARD * _scale(expected), noise_times * torch_side.output_noise.get(name, 0.0))
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
    if problems and all(p.startswith(("gradient of ", *OUTPUT_PROBLEMS)) for p in problems):
        problems = _rounding_apart(family, table, keras_model, x, weights, torch_side, keras_side, problems)
    assert not problems, f"{direction}: the twins differ:\n  " + "\n  ".join(problems)


def _rounding_apart(family, table, keras_model, x, weights, torch_side, keras_side, problems) -> list[str]:
    """The output and gradient problems that remain once the twins are also compared in
    float64: none when the float64 twins agree and every float32 gap is rounding-sized (module
    docstring)."""
    from zoo.nn.keras.precision import dtype_policy

    state = {k: v.astype(np.float64) for k, v in keras_to_tensors(keras_model, table).items()}
    with dtype_policy("64-true"):
        exact_model = family.build_keras(keras_model.zoo_config)
    load_tensors(exact_model, state)
    exact = keras_pass(exact_model, table, x, family, weights.astype(np.float64))
    scale = max(_scale(torch_side.exact_outputs[mode]) for mode in ("eval", "train"))
    outputs_apart = max(_gap(torch_side.exact_outputs[m], getattr(exact, m)) for m in ("eval", "train"))
    if outputs_apart > FLOAT64_AGREE * scale:
        return [*problems, f"and in float64: the outputs {outputs_apart:.3g} > {FLOAT64_AGREE} * {scale:.3g}"]
    largest = max(float(np.max(np.abs(g))) for g in torch_side.exact_gradients.values() if g.size)
    apart = {k: _gap(g, exact.gradients[k]) for k, g in torch_side.exact_gradients.items()}
    if max(apart.values()) > FLOAT64_AGREE * largest:
        worst = max(apart, key=apart.get)
        return [*problems, f"and in float64: {worst} {apart[worst]:.3g} > {FLOAT64_AGREE} * {largest:.3g}"]
    failed = [p.removeprefix("gradient of ").split(":")[0] for p in problems if p.startswith("gradient of ")]
    gaps = {k: _gap(torch_side.gradients[k], keras_side.gradients[k]) for k in failed}
    over = {k: gap for k, gap in gaps.items() if gap > FLOAT32_ROUNDING * largest}
    for problem in problems:  # an output gap over FORWARD is held to rounding's spread alone
        if problem.startswith(OUTPUT_PROBLEMS):
            mode = problem.split("-mode")[0]
            over[f"{mode} outputs"] = _gap(getattr(torch_side, mode), getattr(keras_side, mode))
    spread = _rounding_spread(torch_side, x, weights, list(over)) if over else {}
    return [
        f"{'' if k.endswith(' outputs') else 'gradient of '}{k}: max |diff| {gap:.3g} > "
        f"max({FLOAT32_ROUNDING} * {largest:.3g}, {NOISE} * {spread[k]:.3g}) (float64 twins agree; the "
        "largest gradient, rounding's spread)"
        for k, gap in over.items()
        if gap > NOISE * spread[k]
    ]


def _rounding_spread(
    torch_side: Pass, x: np.ndarray, weights: np.ndarray, names: list[str]
) -> dict[str, float]:
    """How far a rounding-sized change moves each named gradient (or "eval outputs", "train
    outputs"): the largest change over PERTURBATIONS float64 passes of the torch twin, each with
    every parameter multiplied by 1 + FLOAT32_EPS * N(0, 1) (fixed draws)."""
    rng = np.random.default_rng(0)
    inputs = torch.from_numpy(x)
    inputs = inputs.double() if inputs.is_floating_point() else inputs
    spread = dict.fromkeys(names, 0.0)
    for _ in range(PERTURBATIONS):
        moved = copy.deepcopy(torch_side.start)
        with torch.no_grad():
            for p in moved.parameters():
                p.mul_(1.0 + FLOAT32_EPS * torch.from_numpy(rng.normal(size=tuple(p.shape))))
        with torch.no_grad():
            outputs = {"eval outputs": moved.eval()(inputs).numpy()}
        outputs["train outputs"], gradients = _torch_train(moved, inputs, weights)
        for k in names:
            moved_to, exact = (
                (outputs[k], torch_side.exact_outputs[k.split()[0]])
                if k in outputs
                else (gradients[k], torch_side.exact_gradients[k])
            )
            spread[k] = max(spread[k], _gap(moved_to, exact))
    return spread


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
