"""Mixtures of experts (Mixtral, Qwen3-MoE) in the llama family: transformers' numbers in both twins,
the same experts chosen in both, and the load-balancing loss trained with in both frameworks.

The oracle is ``tests/reference/hf_llama.py``'s ``mixtral`` case (4 experts, 2 a token,
renormalised, on both layers, a window of 6) and ``qwen3_moe`` case (5 experts of width 24, 3 a
token, not renormalised, the second layer dense, query/key norms), every norm and bias
randomised. ``tests/test_llama.py`` reads the same fixtures for logits, generation, import and
export; here: gradients, routing, ties, the load-balancing loss and training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import reference_env
import torch
from conftest import perturbed_twins, relative_error
from twin_gradients import keras_pass, largest_gap, torch_pass

import zoo
from zoo.interchange.importing import import_checkpoint
from zoo.nn.keras.moe import routing as keras_routing
from zoo.nn.torch.moe import SparseMoe
from zoo.nn.torch.moe import routing as torch_routing

CASES = ("mixtral", "qwen3_moe")
FRAMEWORKS = ("lightning", "keras")
LOGITS = GRADIENTS = 1e-5  # relative: float32 rounding


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("hf_llama.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("moe")
    return {case: import_checkpoint(reference / case, root / case).path for case in CASES}


def _inputs(reference: Path, case: str):
    return np.load(reference / f"{case}-inputs.npy"), np.load(reference / f"{case}-padding.npy")


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_logits_and_gradients_are_transformers(reference, imported, case, framework):
    """Every parameter's gradient of ``sum(logits * W)``, each expert's and the router's included."""
    ids, padding = _inputs(reference, case)
    model = zoo.load_checkpoint(imported[case], framework=framework)
    weights = np.load(reference / f"{case}-weights.npy")
    logits, grads = (torch_pass if framework == "lightning" else keras_pass)(model, ids, padding, weights)
    assert relative_error(logits[~padding], np.load(reference / f"{case}-logits.npy")[~padding]) <= LOGITS
    expected = dict(np.load(reference / f"{case}-gradients.npz"))
    assert set(grads) == set(expected) and any(".experts.3.down_proj." in name for name in grads)
    gap, worst = largest_gap(grads, expected)
    assert gap <= GRADIENTS, worst


@pytest.mark.parametrize("case", CASES)
def test_both_twins_choose_the_same_experts(reference, imported, case):
    """Each MoE layer's router scores on the reference inputs, and the experts chosen from them, in
    both twins: the same experts for every token."""
    ids, padding = _inputs(reference, case)
    torch_model = zoo.load_checkpoint(imported[case], framework="lightning").eval()
    keras_model = zoo.load_checkpoint(imported[case], framework="keras")
    with torch.no_grad():
        torch_model(torch.from_numpy(ids), padding_mask=torch.from_numpy(padding))
    keras_model(ids, padding_mask=padding, training=False)
    config = torch_model.zoo_config
    routed = [i for i, moe in enumerate(config.moe_layers) if moe]
    assert routed == ([0, 1] if case == "mixtral" else [0])
    for i in routed:
        theirs = np.asarray(keras_model.blocks[i].mlp.router_logits)
        ours = torch_model.layers[i].mlp.router_logits.numpy()
        assert relative_error(theirs, ours) <= 1e-6
        chosen = torch_routing(torch.from_numpy(ours), config.num_experts_per_tok, config.norm_topk_prob)[0]
        keras_chosen = keras_routing(theirs, config.num_experts_per_tok, config.norm_topk_prob)[0]
        assert np.asarray(keras_chosen).tolist() == chosen.tolist()


def test_ties_go_to_the_lower_expert_in_both_twins():
    """Equal scores (a router of zeros, as Qwen3-MoE's starts before its init draws) choose the
    lowest-numbered experts in both twins, where torch.topk's order is its kernel's."""
    scores = np.zeros((3, 8), np.float32)
    scores[1, [2, 5, 6]] = 1.0  # three tied winners for two places
    torch_chosen, torch_weights = torch_routing(torch.from_numpy(scores), 2, True)
    keras_chosen, keras_weights = keras_routing(scores, 2, True)
    assert torch_chosen.tolist() == np.asarray(keras_chosen).tolist() == [[0, 1], [2, 5], [0, 1]]
    assert np.array_equal(torch_weights.numpy(), np.asarray(keras_weights))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_the_load_balancing_loss_is_transformers(reference, imported, case, framework):
    """A training forward with ``output_router_logits`` adds ``router_aux_loss_coef`` times the
    Switch Transformer loss over the real tokens: transformers' ``aux_loss`` on the same inputs."""
    from zoo.checkpoint.metadata import read_checkpoint

    ids, padding = _inputs(reference, case)
    config = read_checkpoint(imported[case]).config.model_copy(
        update={"output_router_logits": True, "router_aux_loss_coef": 0.5}
    )
    family = zoo.registry.get_family("llama")
    source = zoo.load_checkpoint(imported[case], framework="lightning")
    from zoo.checkpoint.tensors import load_tensors, model_tensors

    if framework == "lightning":
        model = family.build_torch(config)
        load_tensors(model, model_tensors(source))
        model.train()(torch.from_numpy(ids), padding_mask=torch.from_numpy(padding))
        got = model.auxiliary_loss.item()
    else:
        model = family.build_keras(config)
        load_tensors(model, model_tensors(source))
        model(ids, padding_mask=padding, training=True)
        got = float(model.losses[-1])
    assert got / 0.5 == pytest.approx(float(np.load(reference / f"{case}-aux.npy")), rel=1e-6)


def test_gradient_checkpointing_keeps_the_balancing_loss_s_gradients():
    """With the load-balancing loss on, a checkpointed step's gradients are a plain step's in both
    frameworks (the routers' scores leave each recomputed layer through the loss too)."""
    import tensorflow as tf

    _, torch_model, keras_model = perturbed_twins(
        "mixtral-micro", vocab_size=41, output_router_logits=True, router_aux_loss_coef=0.7
    )
    ids = np.random.default_rng(0).integers(0, 41, size=(2, 9))

    def torch_grads(checkpointing: bool):
        torch_model.train().zero_grad()
        torch_model.set_grad_checkpointing(checkpointing)
        out = torch_model(torch.from_numpy(ids))
        (out.square().mean() + torch_model.auxiliary_loss).backward()
        return {n: p.grad.clone() for n, p in torch_model.named_parameters()}

    plain, checkpointed = torch_grads(False), torch_grads(True)
    gate = "layers.1.mlp.gate.weight"
    assert plain[gate].abs().max() > 0
    assert max(float((plain[n] - checkpointed[n]).abs().max()) for n in plain) <= 1e-6

    def keras_grads(checkpointing: bool):
        keras_model.set_grad_checkpointing(checkpointing)
        with tf.GradientTape() as tape:
            out = keras_model(ids, training=True)
            loss = tf.reduce_mean(tf.square(out)) + tf.add_n(keras_model.losses)
        grads = tape.gradient(loss, keras_model.trainable_variables)
        return [np.asarray(tf.convert_to_tensor(g)) for g in grads]

    plain, checkpointed = keras_grads(False), keras_grads(True)
    assert max(float(np.abs(a - b).max()) for a, b in zip(plain, checkpointed, strict=True)) <= 1e-6


def test_the_twins_train_with_the_same_balancing_term():
    """One training forward of the same weights: the same load-balancing term in both frameworks."""
    _, torch_model, keras_model = perturbed_twins(
        "mixtral-micro", vocab_size=41, output_router_logits=True, router_aux_loss_coef=0.3
    )
    ids = np.random.default_rng(1).integers(0, 41, size=(3, 10))
    torch_model.train()(torch.from_numpy(ids))
    keras_model(ids, training=True)
    assert float(keras_model.losses[-1]) == pytest.approx(float(torch_model.auxiliary_loss), rel=1e-6)
    assert isinstance(torch_model.layers[0].mlp, SparseMoe)
