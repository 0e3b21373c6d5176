"""Gradient checkpointing in every family and both frameworks: the same gradients, less memory.

Checkpointing may change memory and time, nothing else: gradients, BatchNorm statistics and
(with dropout on) the dropout masks must be those of the plain model. torch replays its
RNG state in the recompute; Keras replays the seeds zoo draws before each rematerialised
block, so in both frameworks a checkpointed step is compared with a plain step that drew
the very same masks, and must match to 1e-6 (it is bit-identical in practice).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from conftest import small_input

from zoo import registry
from zoo.checkpoint.tables import count_parameters
from zoo.keras.data import keras_layout
from zoo.memory import saved_for_backward

TOLERANCE = 1e-6
# A tf.function's CPU reductions are not bit-reproducible from run to run (oneDNN/Eigen split
# sums over threads): the same gpt2-micro graph step, repeated in fresh processes, gave gradient
# gaps of 0, 2.1e-6 and 3.3e-6 relative to each tensor's scale with and without remat. Gemma's
# norm-scale gradients, sums over every token whose terms cancel, moved by 1.2e-5 to 2.4e-5 (the
# same graph without remat: 0 between two runs, 4.3e-6 from eager). A mask redrawn in the
# recompute moves gradients by 1e-2 and more.
GRAPH_TOLERANCE = 1e-4
DROPOUT = 0.3  # high enough that almost every block drops something


def _smallest_preset(family) -> str:
    return min(
        family.presets, key=lambda p: count_parameters(family.weight_table(registry.resolve_config(p.name)))
    ).name


def _cases() -> list[tuple[str, dict[str, Any]]]:
    """The smallest preset of every family at each of its tasks, plus the variants whose blocks
    differ: BatchNorm (resnet-8), GRU cells, pre- and post-norm transformer blocks."""
    cases = []
    for family in registry.families().values():
        name = _smallest_preset(family)
        fields = registry.resolve_config(name).model_fields
        # "features" is a backbone with no head: nothing zoo trains alone (its training is its
        # other tasks' minus the head, covered by those).
        for task in (t for t in family.tasks if t != "features"):
            overrides: dict[str, Any] = {"task": task} if "task" in fields else {}
            if "num_layers" in fields:
                overrides["num_layers"] = 2  # two blocks, and dropout between recurrent layers
            cases.append((name, overrides))
    for name, overrides in [
        ("resnet-8", {}),
        ("lstm-tiny", {"cell": "gru", "num_layers": 2}),
        ("transformer-tiny", {}),
        ("transformer-classic-tiny", {}),
    ]:
        config = registry.resolve_config(name, **overrides)
        if all(config != registry.resolve_config(n, **o) for n, o in cases):
            cases.append((name, overrides))
    return cases


CASES = _cases()
IDS = [
    f"{name}-{o.get('task', 'classification')}{'-' + o['cell'] if 'cell' in o else ''}" for name, o in CASES
]


def _config(name: str, overrides: dict[str, Any], dropout: float):
    config = registry.resolve_config(name, **overrides)
    fields = {k: dropout for k in type(config).model_fields if "dropout" in k}
    return registry.resolve_config(name, **{**small_input(config), **overrides, **fields})


def _max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Largest |a - b| of any tensor, in units of that tensor's scale max(1, max |a|): TensorFlow's
    graph optimiser may order a recomputed block's float32 sums differently (gpt2's tied
    embedding gradient, ~400 in size, moved by 3.6e-5: a relative 1e-7)."""
    assert a.keys() == b.keys()
    return max(
        float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
        / max(1.0, float(np.max(np.abs(a[k]), initial=0.0)))
        for k in a
    )


def _loss(outputs):
    """Sum of squares per sample (either framework): every output counts, gradients are not tiny."""
    return (
        (outputs**2).sum() / outputs.shape[0] if isinstance(outputs, torch.Tensor) else _keras_loss(outputs)
    )


def _keras_loss(outputs):
    from keras import ops

    return ops.sum(ops.square(outputs)) / ops.cast(ops.shape(outputs)[0], outputs.dtype)


def test_every_family_has_a_case():
    assert {registry.get_family(name).name for name, _ in CASES} == set(registry.families())


# ------------------------------------------------------------------------------------ torch


def _torch_step(model, x: torch.Tensor, checkpointing: bool, seed: int = 7):
    """Gradients of one train-mode step and the state after it; the model is put back."""
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.set_grad_checkpointing(checkpointing)
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    _loss(model(x)).backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    after = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.load_state_dict(before)
    return grads, after


@pytest.fixture
def checkpoint_counter(monkeypatch):
    """Counts the blocks run under ``torch.utils.checkpoint.checkpoint``."""
    import zoo.nn.torch.remat

    calls = {"count": 0}
    checkpoint = zoo.nn.torch.remat.checkpoint

    def counting_checkpoint(*args, **kwargs):
        calls["count"] += 1
        return checkpoint(*args, **kwargs)

    monkeypatch.setattr(zoo.nn.torch.remat, "checkpoint", counting_checkpoint)
    return calls


@pytest.mark.parametrize("dropout", [0.0, DROPOUT], ids=["no-dropout", "dropout"])
@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_torch_gradients_are_unchanged(name, overrides, dropout, checkpoint_counter):
    family = registry.get_family(name)
    config = _config(name, overrides, dropout)
    torch.manual_seed(0)
    model = family.build_torch(config)
    x = torch.from_numpy(config.example_input(4, seed=1))
    plain, plain_state = _torch_step(model, x, checkpointing=False)
    assert checkpoint_counter["count"] == 0
    checkpointed, checkpointed_state = _torch_step(model, x, checkpointing=True)
    assert checkpoint_counter["count"] >= 2
    assert _max_diff(plain, checkpointed) <= TOLERANCE
    # BatchNorm statistics are updated once per step, not again by the recompute.
    assert _max_diff(plain_state, checkpointed_state) <= TOLERANCE
    if dropout:  # the masks matter: another seed gives other gradients
        other, _ = _torch_step(model, x, checkpointing=True, seed=8)
        assert _max_diff(plain, other) > 1e3 * TOLERANCE


def _saved_bytes(model, x: torch.Tensor) -> int:
    """Bytes kept for backward by one forward pass, each storage counted once."""
    with saved_for_backward() as storages:
        loss = _loss(model(x))
    loss.backward()
    return sum(storages.values())


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("transformer-tiny", {"task": "language_modeling", "num_layers": 4}),
        ("lstm-tiny", {"task": "language_modeling", "num_layers": 4}),
    ],
)
def test_torch_checkpointing_saves_less(name, overrides):
    config = registry.resolve_config(name, **overrides)
    model = registry.get_family(name).build_torch(config).train()
    x = torch.from_numpy(config.example_input(8, seed=1))
    plain = _saved_bytes(model, x)
    model.set_grad_checkpointing(True)
    checkpointed = _saved_bytes(model, x)
    assert checkpointed < 0.6 * plain, (plain, checkpointed)


def test_torch_eval_and_no_grad_never_checkpoint(monkeypatch):
    import zoo.nn.torch.remat

    def refuse(*args, **kwargs):
        raise AssertionError("checkpointed outside training")

    monkeypatch.setattr(zoo.nn.torch.remat, "checkpoint", refuse)
    config = registry.resolve_config("transformer-tiny")
    model = registry.get_family("transformer").build_torch(config)
    model.set_grad_checkpointing(True)
    x = torch.from_numpy(config.example_input(2))
    model.eval()(x).sum().backward()
    with torch.no_grad():
        model.train()(x)


# ------------------------------------------------------------------------------------ Keras


def _keras_step(model, inputs: tuple, checkpointing: bool, graph: bool):
    """Gradients of one training-mode step and every variable after it (seed-generator states
    included); the model is then put back, so the next step draws the same dropout masks."""
    import tensorflow as tf

    before = [v.numpy() for v in model.variables]
    model.set_grad_checkpointing(checkpointing)

    def step(*inputs):
        with tf.GradientTape() as tape:
            loss = _loss(model(*inputs, training=True))
        return tape.gradient(loss, model.trainable_variables)

    # A new tf.function per call: the checkpointing flag is read while tracing.
    grads = (tf.function(step) if graph else step)(*inputs)
    grads = {
        v.path: np.asarray(tf.convert_to_tensor(g))
        for v, g in zip(model.trainable_variables, grads, strict=True)
    }
    after = {f"{i}:{v.path}": v.numpy() for i, v in enumerate(model.variables)}
    for variable, value in zip(model.variables, before, strict=True):
        variable.assign(value)
    return grads, after


@pytest.fixture
def recompute_counter(monkeypatch):
    """Counts the runs of every rematerialised block: forward plus recompute."""
    import zoo.nn.keras.remat

    runs = {"count": 0}
    remat = zoo.nn.keras.remat.recompute_grad

    def counting_remat(fn):
        def counted(*args):
            runs["count"] += 1
            return fn(*args)

        return remat(counted)

    monkeypatch.setattr(zoo.nn.keras.remat, "recompute_grad", counting_remat)
    return runs


@pytest.mark.parametrize(
    ("dropout", "graph"),
    [(0.0, False), (DROPOUT, True)],
    ids=["no-dropout-eager", "dropout-tf.function"],
)
@pytest.mark.parametrize(("name", "overrides"), CASES, ids=IDS)
def test_keras_gradients_are_unchanged(name, overrides, dropout, graph, recompute_counter):
    family = registry.get_family(name)
    config = _config(name, overrides, dropout)
    model = family.build_keras(config)
    x = keras_layout(config.example_input(4, seed=1), family.input_kind)
    plain, plain_state = _keras_step(model, (x,), checkpointing=False, graph=graph)
    assert recompute_counter["count"] == 0
    checkpointed, checkpointed_state = _keras_step(model, (x,), checkpointing=True, graph=graph)
    assert recompute_counter["count"] >= 4  # at least two blocks, each run twice
    tolerance = GRAPH_TOLERANCE if graph else TOLERANCE
    assert _max_diff(plain, checkpointed) <= tolerance
    # BatchNorm statistics once per step, and every seed generator advanced as without remat.
    assert _max_diff(plain_state, checkpointed_state) <= tolerance


def test_keras_test_would_see_redrawn_masks(monkeypatch):
    """Without the seed replay, remat redraws the masks and the comparison above fails."""
    import zoo.nn.keras.remat

    config = _config("transformer-tiny", {"task": "language_modeling"}, DROPOUT)
    model = registry.get_family("transformer").build_keras(config)
    x = config.example_input(4, seed=1)
    plain, _ = _keras_step(model, (x,), checkpointing=False, graph=False)
    monkeypatch.setattr(zoo.nn.keras.remat._SeedsReplayed, "__enter__", lambda self: None)
    monkeypatch.setattr(zoo.nn.keras.remat._SeedsReplayed, "__exit__", lambda self, *exc: None)
    redrawn, _ = _keras_step(model, (x,), checkpointing=True, graph=False)
    assert _max_diff(plain, redrawn) > 1e3 * TOLERANCE


def test_keras_fit_step_is_unchanged(recompute_counter):
    """One ``fit`` step of a language model with dropout, compiled as zoo's Keras trainer
    compiles: the same weights and seed-generator states with and without remat."""
    import keras

    from zoo.keras.steps import compile_for

    config = _config("transformer-tiny", {"task": "language_modeling"}, DROPOUT)
    model = registry.get_family("transformer").build_keras(config)
    x = config.example_input(8, seed=1)
    y = np.random.default_rng(2).integers(0, config.vocab_size, size=x.shape)
    start = [v.numpy() for v in model.variables]
    results = []
    for checkpointing in (False, True):
        for variable, value in zip(model.variables, start, strict=True):
            variable.assign(value)
        model.set_grad_checkpointing(checkpointing)
        compile_for(model, "language_modeling", keras.optimizers.SGD(0.5))
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        results.append({f"{i}:{v.path}": v.numpy() for i, v in enumerate(model.variables)})
    assert recompute_counter["count"] == 2 * config.num_layers
    assert _max_diff(*results) <= TOLERANCE


def test_keras_padding_mask_reaches_checkpointed_blocks():
    """The boolean attention mask is closed over, not passed through ``recompute_grad``."""
    config = _config("transformer-tiny", {}, DROPOUT)
    model = registry.get_family("transformer").build_keras(config)
    x = config.example_input(4, seed=1)
    padding = np.zeros((4, x.shape[1]), dtype=bool)
    padding[:, -3:] = True
    plain, _ = _keras_step(model, (x, padding), checkpointing=False, graph=True)
    checkpointed, _ = _keras_step(model, (x, padding), checkpointing=True, graph=True)
    assert _max_diff(plain, checkpointed) <= TOLERANCE


def test_keras_inference_never_rematerialises(monkeypatch):
    import zoo.nn.keras.remat

    def refuse(fn):
        raise AssertionError("rematerialised outside training")

    monkeypatch.setattr(zoo.nn.keras.remat, "recompute_grad", refuse)
    config = registry.resolve_config("transformer-tiny")
    model = registry.get_family("transformer").build_keras(config)
    model.set_grad_checkpointing(True)
    x = config.example_input(2)
    model(x)
    model.predict(x, verbose=0)
