"""Recurrent nets over padded variable-length batches, and the tied language-model head.

The padded batch is the real claim: a sequence padded at the end must give exactly what it
gives alone, in both twins (torch packs, Keras masks), for every direction and pooling, and
the twins must agree with each other. Padding is at the end of each row; the twins refuse
any other layout rather than read pads.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import relative_error

from zoo import registry
from zoo.checkpoint.tensors import load_tensors, model_tensors

TOLERANCE = 2e-5  # float32, relative to the largest output
LENGTHS = (5, 2, 7, 1)  # real steps per row of the padded batch; the longest sets T
STEPS = max(LENGTHS)

CASES = [
    pytest.param(dict(architecture="lstm", bidirectional=True, pooling="last"), id="bilstm-last"),
    pytest.param(dict(architecture="lstm", bidirectional=True, pooling="mean"), id="bilstm-mean"),
    pytest.param(dict(architecture="lstm", cell="gru", bidirectional=True), id="bigru-last"),
    pytest.param(dict(architecture="lstm", num_layers=1), id="lstm-last"),
    pytest.param(dict(architecture="rnn", bidirectional=True, pooling="mean"), id="birnn-mean"),
]


def build_twins(**fields):
    defaults = dict(hidden_size=6, embedding_dim=5, num_layers=2, vocab_size=11)
    config = registry.resolve_config(fields.pop("architecture"), **{**defaults, **fields})
    family = registry.get_family(config.architecture)
    torch_model = family.build_torch(config)
    keras_model = family.build_keras(config)
    load_tensors(keras_model, model_tensors(torch_model))
    return config, torch_model, keras_model


def padded_batch(config, seed: int = 0):
    """A right-padded batch of LENGTHS, its padding mask, and each row alone (unpadded)."""
    rng = np.random.default_rng(seed)
    if config.reads_tokens:
        x = rng.integers(0, config.vocab_size, size=(len(LENGTHS), STEPS), dtype=np.int64)
    else:
        x = rng.normal(size=(len(LENGTHS), STEPS, config.input_size)).astype(np.float32)
    mask = np.arange(STEPS)[None, :] >= np.asarray(LENGTHS)[:, None]
    x[mask] = 0  # what a pad id or zero features look like; the mask, not the value, must count
    alone = [x[i : i + 1, :length] for i, length in enumerate(LENGTHS)]
    return x, mask, alone


def torch_forward(model, x, mask=None, training=False):
    import torch

    model.train(training)
    with torch.no_grad():
        padding = None if mask is None else torch.from_numpy(mask)
        return model(torch.from_numpy(x), padding_mask=padding).numpy()


def keras_forward(model, x, mask=None, training=False):
    return np.asarray(model(x, padding_mask=mask, training=training))


@pytest.mark.parametrize("inputs", ["tokens", "features"])
@pytest.mark.parametrize("fields", CASES)
def test_padded_rows_give_what_they_give_alone_in_both_twins(fields, inputs):
    config, torch_model, keras_model = build_twins(**fields, inputs=inputs)
    x, mask, alone = padded_batch(config)
    expected = np.concatenate([torch_forward(torch_model, row) for row in alone])
    got_torch = torch_forward(torch_model, x, mask)
    got_keras = keras_forward(keras_model, x, mask)
    assert relative_error(got_torch, expected) < TOLERANCE
    assert relative_error(got_keras, expected) < TOLERANCE
    # Without the mask the pads are read: the test would notice a mask that is ignored.
    assert relative_error(torch_forward(torch_model, x), expected) > 1e-3


def test_padded_language_model_positions_match_and_pads_are_zero_features():
    config, torch_model, keras_model = build_twins(architecture="lstm", task="language_modeling")
    x, mask, alone = padded_batch(config)
    got_torch = torch_forward(torch_model, x, mask)
    got_keras = keras_forward(keras_model, x, mask)
    for i, row in enumerate(alone):
        expected = torch_forward(torch_model, row)[0]
        assert relative_error(got_torch[i, : LENGTHS[i]], expected) < TOLERANCE
        assert relative_error(got_keras[i, : LENGTHS[i]], expected) < TOLERANCE
    # Both twins write a pad's features as zeros, so its logits are the head's bias alone.
    bias = model_tensors(torch_model)["head.bias"]
    assert np.allclose(got_torch[mask], bias, atol=1e-6)
    assert np.allclose(got_keras[mask], bias, atol=1e-6)


def test_padding_that_is_not_at_the_end_is_refused():
    import torch

    config, torch_model, _ = build_twins(architecture="lstm", bidirectional=True)
    x, mask, _ = padded_batch(config)
    with pytest.raises(ValueError, match="right padding"):
        torch_model(torch.from_numpy(x), padding_mask=torch.from_numpy(mask[:, ::-1].copy()))


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_gradient_checkpointing_replays_the_mask(framework):
    """Recomputing each layer in backward must replay the mask: the same gradients."""
    config, torch_model, keras_model = build_twins(architecture="lstm", bidirectional=True, inputs="tokens")
    x, mask, _ = padded_batch(config)
    model = torch_model if framework == "lightning" else keras_model
    plain = gradients(model, x, mask)
    registry.get_family("lstm").set_grad_checkpointing(model, framework, True)
    for got, expected in zip(gradients(model, x, mask), plain, strict=True):
        assert relative_error(got, expected) < 1e-6


def gradients(model, x, mask) -> list[np.ndarray]:
    """Gradients of a fixed random projection of the outputs, in the framework's own order."""
    from zoo.checkpoint.tensors import framework_of

    weights = np.random.default_rng(1).normal(size=(len(x), model.zoo_config.num_classes)).astype(np.float32)
    if framework_of(model) == "keras":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, padding_mask=mask, training=True) * weights)
        return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, model.trainable_variables)]
    import torch

    model.train()
    model.zero_grad()
    outputs = model(torch.from_numpy(x), padding_mask=torch.from_numpy(mask))
    (outputs * torch.from_numpy(weights)).sum().backward()
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_tied_head_is_one_tensor_trained_by_both_uses():
    config, torch_model, keras_model = build_twins(
        architecture="lstm", task="language_modeling", num_layers=1, embedding_dim=6, tie_embeddings=True
    )
    table = registry.get_family("lstm").weight_table(config)
    names = [spec.name for port in table for spec in port.tensors]
    assert "head.weight" not in names and "embedding.weight" in names and "head.bias" in names
    assert set(model_tensors(torch_model)) == set(names)
    x, _, _ = padded_batch(config)
    assert relative_error(keras_forward(keras_model, x), torch_forward(torch_model, x)) < TOLERANCE

    import torch

    logits = torch_model(torch.from_numpy(x))
    logits.logsumexp(-1).sum().backward()
    grad = torch_model.embedding.weight.grad
    # Rows of tokens absent from the batch get gradient only through the head.
    absent = sorted(set(range(config.vocab_size)) - set(x.ravel().tolist()))
    assert absent and torch.all(grad[absent].abs().sum(-1) > 0)


def test_tie_needs_matching_widths_and_a_language_model():
    with pytest.raises(ValueError, match="embedding_dim"):
        registry.resolve_config("lstm", task="language_modeling", tie_embeddings=True, embedding_dim=5)
    with pytest.raises(ValueError, match="language_modeling"):
        registry.resolve_config("lstm", tie_embeddings=True, embedding_dim=128)


def test_medium_language_model_preset_counts_as_published():
    """Zaremba et al.'s medium model at their 10,000-word vocabulary: 13.28M tied."""
    from zoo.checkpoint.tables import count_parameters

    config = registry.resolve_config("lstm-medium-lm", vocab_size=10_000)
    table = registry.get_family("lstm").weight_table(config)
    embedding, per_layer = 10_000 * 650, 4 * 650 * (650 + 650 + 2)
    assert count_parameters(table) == embedding + 2 * per_layer + 10_000
