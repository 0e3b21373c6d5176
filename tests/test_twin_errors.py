"""Input one twin used to accept and the other refuse: now both refuse it, in the same words.

- A token id outside [0, vocab_size): torch raised IndexError, Keras read the last row for
  -1 (TensorFlow's ``take`` wraps negative ids) or failed in TensorFlow's words.
- BatchNorm in training with one value per channel (a batch of 1 with 1x1 maps): torch
  raised, Keras went on silently.
- A sequence longer than max_len.

Eagerly, both twins raise ``zoo.nn.errors.InputError``; inside a TensorFlow graph the
Keras step fails with the same message, which ``input_error`` recognises.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from architectures.gpt2.config import sequence_length_message as gpt2_length_message
from architectures.llama.config import sequence_length_message as llama_length_message
from zoo import registry
from zoo.nn.errors import (
    InputError,
    batchnorm_message,
    input_error,
    sequence_length_message,
    token_ids_message,
)

VOCAB = 7
LANGUAGE_MODELS = ["transformer-tiny", "rnn-tiny", "lstm-tiny", "gru-small"]


def _twins(name: str, **overrides):
    config = registry.resolve_config(name, **overrides)
    family = registry.get_family(name)
    return config, family.build_torch(config), family.build_keras(config)


def _raised(call) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


def _torch_forward(model, x, training: bool):
    model.train(training)
    with torch.no_grad():
        return model(torch.from_numpy(x))


@pytest.mark.parametrize("bad", [-1, VOCAB, VOCAB + 100], ids=["negative", "vocab_size", "beyond"])
@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_token_ids_outside_the_vocabulary(name, bad):
    config, torch_model, keras_model = _twins(name, task="language_modeling", vocab_size=VOCAB, dropout=0.0)
    ids = config.example_input(2, seed=1)
    ids[1, 3] = bad
    expected = token_ids_message(VOCAB)
    torch_error = _raised(lambda: _torch_forward(torch_model, ids, training=False))
    keras_error = _raised(lambda: keras_model(ids, training=False))
    assert type(torch_error) is InputError and type(keras_error) is InputError
    assert str(torch_error) == str(keras_error) == expected
    assert isinstance(torch_error, ValueError)


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_token_ids_at_the_edges_of_the_vocabulary_pass(name):
    _, torch_model, keras_model = _twins(name, task="language_modeling", vocab_size=VOCAB, dropout=0.0)
    ids = np.array([[0, VOCAB - 1, 0, VOCAB - 1]], dtype=np.int64)
    out_torch = _torch_forward(torch_model, ids, training=True).numpy()
    out_keras = np.asarray(keras_model(ids, training=True))
    assert out_torch.shape == out_keras.shape == (1, 4, VOCAB)


def test_token_ids_in_a_keras_graph():
    """Inside a tf.function (as in ``fit``) the step fails with the same message."""
    import tensorflow as tf

    _, _, keras_model = _twins("rnn-tiny", task="language_modeling", vocab_size=VOCAB)
    call = tf.function(
        lambda ids: keras_model(ids, training=True), input_signature=[tf.TensorSpec((None, None), tf.int64)]
    )
    call(np.zeros((2, 5), dtype=np.int64))
    error = _raised(lambda: call(np.full((2, 5), -1, dtype=np.int64)))
    assert isinstance(error, tf.errors.InvalidArgumentError)
    assert str(input_error(error)) == token_ids_message(VOCAB)


def test_torch_check_on_a_device_or_while_compiling_is_asynchronous(monkeypatch):
    """No host synchronisation there: ``torch._assert_async`` (on the CPU it raises at once)."""
    from zoo.nn.torch import check_token_ids

    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    calls = []
    real = torch._assert_async
    monkeypatch.setattr(torch, "_assert_async", lambda *a: (calls.append(a), real(*a))[1])
    check_token_ids(torch.tensor([[0, VOCAB - 1]]), VOCAB)
    error = _raised(lambda: check_token_ids(torch.tensor([[0, VOCAB]]), VOCAB))
    assert len(calls) == 2
    assert type(error) is RuntimeError and str(input_error(error)) == token_ids_message(VOCAB)


# ------------------------------------------------------------------------------ BatchNorm

ONE_BY_ONE = {"image_size": 4, "num_classes": 3}  # resnet-8: 4x4 -> 2x2 -> 1x1 in the last stage


def test_batchnorm_with_one_value_per_channel():
    config, torch_model, keras_model = _twins("resnet-8", **ONE_BY_ONE)
    x = config.example_input(1, seed=1)
    x_keras = np.moveaxis(x, 1, -1)
    torch_error = _raised(lambda: _torch_forward(torch_model, x, training=True))
    keras_error = _raised(lambda: keras_model(x_keras, training=True))
    assert type(torch_error) is InputError and type(keras_error) is InputError
    expected = batchnorm_message(2)
    assert str(torch_error) == str(keras_error) == expected
    assert expected == (
        "BatchNorm in training needs more than one value per channel; got a batch of 1 with 1x1 "
        "feature maps: use a larger batch or evaluation mode"
    )


def test_batchnorm_refusal_leaves_what_works():
    """Evaluation with a batch of 1, and training with a batch of 2, still run in both twins."""
    config, torch_model, keras_model = _twins("resnet-8", **ONE_BY_ONE)
    one, two = config.example_input(1, seed=1), config.example_input(2, seed=1)
    assert _torch_forward(torch_model, one, training=False).shape == (1, 3)
    assert np.asarray(keras_model(np.moveaxis(one, 1, -1), training=False)).shape == (1, 3)
    assert _torch_forward(torch_model, two, training=True).shape == (2, 3)
    assert np.asarray(keras_model(np.moveaxis(two, 1, -1), training=True)).shape == (2, 3)


def test_batchnorm_in_a_keras_graph():
    """A batch size known only when the graph runs: the step fails with the same message; a
    batch of 1 known when tracing: the trace raises ``InputError`` itself."""
    import tensorflow as tf

    config, _, keras_model = _twins("resnet-8", **ONE_BY_ONE)
    x = np.moveaxis(config.example_input(1, seed=1), 1, -1)
    unknown_batch = tf.function(
        lambda x: keras_model(x, training=True), input_signature=[tf.TensorSpec((None, 4, 4, 1), tf.float32)]
    )
    unknown_batch(np.concatenate([x, x]))
    error = _raised(lambda: unknown_batch(x))
    assert isinstance(error, tf.errors.InvalidArgumentError)
    assert str(input_error(error)) == batchnorm_message(2)
    traced_with_one = tf.function(lambda x: keras_model(x, training=True))
    error = _raised(lambda: traced_with_one(x))
    assert type(error) is InputError and str(error) == batchnorm_message(2)


def test_batchnorm_layers_agree_on_every_rank():
    from zoo.nn.keras.norm import BatchNorm
    from zoo.nn.torch import BatchNorm2d

    torch_error = _raised(lambda: BatchNorm2d(3).train()(torch.zeros(1, 3, 1, 1)))
    keras_error = _raised(lambda: BatchNorm()(np.zeros((1, 1, 1, 3), np.float32), training=True))
    assert str(torch_error) == str(keras_error) == batchnorm_message(2)
    keras_error = _raised(lambda: BatchNorm()(np.zeros((1, 3), np.float32), training=True))
    assert str(keras_error) == batchnorm_message(0)  # as torch's BatchNorm1d would refuse it
    assert np.asarray(BatchNorm()(np.ones((1, 2, 1, 3), np.float32), training=True)).shape == (1, 2, 1, 3)


# ------------------------------------------------------------------------------ max_len


def test_sequences_longer_than_max_len():
    import tensorflow as tf

    _, torch_model, keras_model = _twins("transformer-tiny", task="language_modeling", max_len=16)
    ids = np.zeros((1, 17), dtype=np.int64)
    torch_error = _raised(lambda: _torch_forward(torch_model, ids, training=False))
    keras_error = _raised(lambda: keras_model(ids, training=False))
    assert type(torch_error) is InputError and type(keras_error) is InputError
    assert str(torch_error) == str(keras_error) == sequence_length_message(16, 17)
    call = tf.function(lambda ids: keras_model(ids), input_signature=[tf.TensorSpec((None, None), tf.int64)])
    call(ids[:, :16])
    error = _raised(lambda: call(ids))
    assert str(input_error(error)) == sequence_length_message(16)


# ------------------------------------------------------------------------------ the message


def test_input_error_finds_zoo_messages_only():
    message = token_ids_message(128)
    assert message == (
        "token ids must lie in [0, 128) (the model's vocab_size); got ids outside it: check the "
        "tokenizer/vocabulary or raise vocab_size"
    )
    own = InputError(message)
    assert input_error(own) is own
    escaped = RuntimeError("assertion failed: [" + message.replace("'", "\\'") + "]\n\t [[{{node x}}]]")
    assert str(input_error(escaped)) == message
    assert input_error(RuntimeError("assertion failed: [something else]")) is None
    assert input_error(ValueError(sequence_length_message(8, 9))) is not None


def _descendants(roots) -> set:
    """Every op that reads, through data or control edges, one of ``roots``."""
    consumers: dict = {}
    for op in roots[0].graph.get_operations():
        for before in [t.op for t in op.inputs] + list(op.control_inputs):
            consumers.setdefault(before, []).append(op)
    seen, stack = set(), list(roots)
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(consumers.get(op, []))
    return seen


@pytest.mark.parametrize(
    "name, overrides, said",
    [
        ("transformer-tiny", {"task": "language_modeling", "max_len": 16}, sequence_length_message),
        ("gpt2-micro", {"n_positions": 16}, gpt2_length_message),
        ("llama-micro", {"max_position_embeddings": 16}, llama_length_message),
        ("bert-micro", {"max_len": 16}, sequence_length_message),
    ],
)
def test_no_lookup_runs_before_the_length_check(name, overrides, said):
    """In a graph every gather (token and position tables) waits for the length check: a
    position lookup beside it would otherwise race it and, past the table's end, fail first in
    TensorFlow's words (which CI saw under load, once in many runs)."""
    import tensorflow as tf

    _, _, keras_model = _twins(name, **overrides)
    call = tf.function(lambda ids: keras_model(ids), input_signature=[tf.TensorSpec((None, None), tf.int64)])
    graph = call.get_concrete_function().graph
    message = said(16).encode()
    texts = lambda op: [  # noqa: E731 - the strings an Assert reports
        s for t in op.inputs if t.op.type == "Const" for s in tf.make_ndarray(t.op.get_attr("value")).ravel()
    ]
    checks = [
        op for op in graph.get_operations() if op.type == "Assert" and any(message in s for s in texts(op))
    ]
    assert len(checks) == 1, [op.name for op in graph.get_operations() if op.type == "Assert"]
    gathers = [op for op in graph.get_operations() if "Gather" in op.type]
    assert gathers
    unchecked = [op.name for op in gathers if op not in _descendants(checks)]
    assert not unchecked, f"gathers that may run before the length check: {unchecked}"
