"""zoo's shared self-attention: the torch and Keras twins compute the same, whatever the weights.

At torch's initialisation every attention bias is zero, so a wrong bias addition cannot
show: every test here first fills EVERY tensor with random values. The shapes are the
ones that broke ``keras.layers.MultiHeadAttention`` on TensorFlow (docs/keras-bias-add-bug.md):
one feature per head (num_heads == d_model) and a sequence exactly as long as there are
heads.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import forward_keras, forward_torch, max_diff, parity_config

from zoo import registry
from zoo.checkpoint.tables import keras_layer
from zoo.checkpoint.tensors import load_tensors, model_tensors

TOLERANCE = 1e-5
HEADS = 8  # = d_model: head_dim 1; sequences of HEADS steps


def _twins(task: str, **overrides):
    """Torch and Keras transformers with the same random values in every tensor."""
    config = parity_config(
        "transformer",
        task=task,
        d_model=HEADS,
        num_heads=HEADS,
        num_layers=2,
        ff_dim=16,
        vocab_size=11,
        **overrides,
    )
    family = registry.get_family("transformer")
    torch.manual_seed(0)
    torch_model = family.build_torch(config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in torch_model.parameters():
            parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    keras_model = family.build_keras(config)
    load_tensors(keras_model, model_tensors(torch_model))
    return config, family, torch_model, keras_model


def _input(config, batch: int = 3, seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if config.causal:
        return rng.integers(0, config.vocab_size, size=(batch, HEADS), dtype=np.int64)
    return rng.normal(size=(batch, HEADS, config.input_size)).astype(np.float32)


def test_every_attention_tensor_is_random():
    """The premise of the tests below: no tensor is left at its (zero) initial value."""
    _, _, torch_model, _ = _twins("classification")
    attention = torch_model.blocks[0].attn
    for name, tensor in attention.state_dict().items():
        assert float(tensor.abs().min()) > 0, name


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("task", ["classification", "language_modeling"])
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_head_dim_one_twins_agree(task, norm_first, training):
    config, family, torch_model, keras_model = _twins(task, norm_first=norm_first)
    x = _input(config)
    out_torch = forward_torch(torch_model, x, training)
    out_keras = forward_keras(keras_model, x, family, training)
    assert max_diff(out_torch, out_keras) <= TOLERANCE


def _padding(batch: int = 3) -> np.ndarray:
    padding = np.zeros((batch, HEADS), dtype=bool)
    padding[0, -3:] = True  # right padding
    padding[1, :2] = True  # left padding: in an LM, steps whose every earlier key is padding
    padding[2, :] = True  # nothing but padding: each step still attends to itself
    return padding


@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "padding"])
@pytest.mark.parametrize("task", ["classification", "language_modeling"])
def test_masks_agree(task, padded):
    """Causal (language model), padding, and both: same outputs, and no NaN from an empty row."""
    config, _, torch_model, keras_model = _twins(task)
    x = _input(config)
    padding = _padding() if padded else None
    torch_model.eval()
    with torch.no_grad():
        out_torch = torch_model(torch.from_numpy(x), None if padding is None else torch.from_numpy(padding))
    out_keras = np.asarray(keras_model(x, padding, training=False))
    assert np.isfinite(out_torch.numpy()).all()
    assert max_diff(out_torch.numpy(), out_keras) <= TOLERANCE
    if padded and not config.causal:  # the padding changed something: it is not ignored
        plain = forward_torch(torch_model, x, training=False)
        assert max_diff(plain, out_torch.numpy()) > 1e-3


@pytest.mark.parametrize("task", ["classification", "language_modeling"])
def test_attention_gradients_agree(task):
    """Gradients of every attention tensor, biases included, mapped through the weight port."""
    config, family, torch_model, keras_model = _twins(task)
    import tensorflow as tf

    x = _input(config)
    padding = _padding()
    out_torch = torch_model(torch.from_numpy(x), torch.from_numpy(padding))
    weights = np.random.default_rng(3).normal(size=tuple(out_torch.shape)).astype(np.float32)
    (out_torch * torch.from_numpy(weights)).sum().backward()
    torch_grads = {name: p.grad.numpy() for name, p in torch_model.named_parameters()}

    ports = [p for p in family.weight_table(config) if p.layer.endswith(".attn")]
    assert len(ports) == config.num_layers
    variables = [keras_layer(keras_layer(keras_model, p.layer), v) for p in ports for v in p.variables]
    with tf.GradientTape() as tape:
        out_keras = keras_model(x, padding, training=True)
        loss = tf.reduce_sum(out_keras * weights)
    grads = iter(g.numpy() for g in tape.gradient(loss, variables))
    for port in ports:
        mapped = port.to_torch(*(next(grads) for _ in port.variables))
        for spec, grad in zip(port.tensors, mapped, strict=True):
            expected = torch_grads[spec.name]
            assert float(np.abs(expected).max()) > 0 or spec.name.endswith("in_proj_bias"), spec.name
            assert max_diff(expected, grad) <= TOLERANCE, spec.name


def test_keras_layer_variables_are_the_fused_torch_layout():
    """The port is a transpose: the Keras kernel is torch's in_proj_weight transposed."""
    _, _, torch_model, keras_model = _twins("classification")
    torch_attention = torch_model.blocks[1].attn
    keras_attention = keras_model.blocks[1].attn
    np.testing.assert_array_equal(
        keras_attention.in_proj_kernel.numpy(), torch_attention.in_proj_weight.detach().numpy().T
    )
    np.testing.assert_array_equal(
        keras_attention.in_proj_bias.numpy(), torch_attention.in_proj_bias.detach().numpy()
    )
    np.testing.assert_array_equal(
        keras_attention.out_proj.kernel.numpy(), torch_attention.out_proj.weight.detach().numpy().T
    )


def test_torch_attention_starts_as_multihead_attention_did():
    """Same parameter names and, after the same seed, the same initial values and RNG state."""
    from zoo.nn.torch import SelfAttention

    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(16, 4, batch_first=True).state_dict()
    after_reference = torch.rand(4)
    torch.manual_seed(0)
    ours = SelfAttention(16, 4).state_dict()
    after_ours = torch.rand(4)
    assert list(ours) == list(reference)
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=0, atol=0)
    torch.testing.assert_close(after_ours, after_reference, rtol=0, atol=0)


def test_torch_attention_computes_what_multihead_attention_does():
    """With random biases and a causal mask, against nn.MultiheadAttention itself (float64)."""
    from zoo.nn.torch import SelfAttention, blocked_mask

    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(HEADS, HEADS, batch_first=True).double()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_()
    ours = SelfAttention(HEADS, HEADS).double()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, HEADS, HEADS, dtype=torch.float64)
    blocked = blocked_mask(HEADS, causal=True)
    expected, _ = reference(x, x, x, attn_mask=blocked, need_weights=False)
    torch.testing.assert_close(ours(x, blocked), expected, rtol=1e-10, atol=1e-10)


def test_keras_attention_initialises_like_torch():
    """Xavier-uniform projection, nn.Linear's bound for the output kernel, zero biases."""
    from zoo.nn.keras import SelfAttention

    layer = SelfAttention(64, 4)
    layer.build((None, None, 64))
    projection_bound = (6 / (64 + 3 * 64)) ** 0.5
    assert 0.9 * projection_bound < np.abs(layer.in_proj_kernel.numpy()).max() <= projection_bound
    assert 0.9 / 8 < np.abs(layer.out_proj.kernel.numpy()).max() <= 1 / 8
    assert not layer.in_proj_bias.numpy().any() and not layer.out_proj.bias.numpy().any()


def test_keras_graph_with_unknown_length_agrees():
    """Inside a tf.function whose sequence length is unknown (as in ``fit``), masks included."""
    import tensorflow as tf

    config, _, torch_model, keras_model = _twins("language_modeling")
    x, padding = _input(config), _padding()
    call = tf.function(
        lambda ids, pad: keras_model(ids, pad, training=False),
        input_signature=[tf.TensorSpec((None, None), tf.int64), tf.TensorSpec((None, None), tf.bool)],
    )
    torch_model.eval()
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(x), torch.from_numpy(padding)).numpy()
    assert max_diff(expected, call(x, padding).numpy()) <= TOLERANCE
