"""The Keras twin's traced prediction (issue 41): ``zoo predict`` runs the Keras twin through one
``tf.function`` with a fixed input signature (``zoo.nn.keras.inference``), batch dimension open.

For an image family (classification) and a text family (sequence and token classification): the
traced outputs are the eager Keras call's within float32 rounding and the torch twin's within the
twins' tolerance, with and without padding and token types; the function is not traced again for
another batch size (the short last batch), another text length, or another ``zoo predict`` batch.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import perturbed_twins, relative_error

import zoo
from zoo.backend import save_checkpoint
from zoo.keras.backend import KerasBackend
from zoo.keras.data import keras_layout
from zoo.nn.keras.inference import forward, traced_forward

ROUNDING = 1e-5  # traced against eager Keras: float32 rounding (the sums' order may differ)
TWINS = 1e-4  # against the torch twin's
IMAGE = ("convnext-micro", {"image_size": 8, "in_channels": 3, "num_classes": 5})
TEXT_TASKS = {
    "classification": {"task": "classification", "num_classes": 3},
    "token_classification": {"task": "token_classification", "num_classes": 4},
}


@pytest.fixture(scope="module")
def image_twins():
    name, fields = IMAGE
    return perturbed_twins(name, **fields)


@pytest.fixture(scope="module", params=sorted(TEXT_TASKS))
def text_twins(request):
    return perturbed_twins("bert-micro", vocab_size=50, **TEXT_TASKS[request.param])


def torch_logits(model, x, **extras):
    import torch

    with torch.inference_mode():
        named = {k: torch.from_numpy(v) for k, v in extras.items()}
        return model(torch.from_numpy(x), **named).numpy()


def test_traced_image_logits_are_the_eager_ones_at_every_batch_size_with_one_trace(image_twins):
    config, torch_model, keras_model = image_twins
    traced = traced_forward(keras_model)
    rng = np.random.default_rng(0)
    for batch in (4, 4, 1, 3):  # a short last batch runs the same graph
        x = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        channels_last = keras_layout(x, "image")
        got = traced(channels_last)
        assert got.dtype == np.float32 and got.shape == (batch, config.num_classes)
        assert relative_error(got, keras_model(channels_last, training=False)) <= ROUNDING
        assert relative_error(got, torch_logits(torch_model, x)) <= TWINS
    assert traced.traces == 1


def padded_text(vocab_size: int, rows: int, steps: int, seed: int):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, size=(rows, steps))
    padding = np.zeros(ids.shape, bool)
    padding[1:, steps - 2 :] = True  # every row but the first ends in padding
    ids[padding] = 0
    return ids, padding


def test_traced_text_logits_are_the_eager_ones_for_every_batch_and_length_with_one_trace(text_twins):
    config, torch_model, keras_model = text_twins
    traced = traced_forward(keras_model)
    before = traced.traces
    for seed, (rows, steps) in enumerate([(3, 9), (3, 12), (2, 5)]):
        ids, padding = padded_text(config.vocab_size, rows, steps, seed)
        types = np.zeros_like(ids)
        types[:, steps // 2 :] = 1
        got = forward(keras_model, ids, padding_mask=padding, token_type_ids=types)
        eager = keras_model(ids, padding_mask=padding, token_type_ids=types, training=False)
        kept = ~padding  # padded positions' outputs are not compared (token tasks leave them out)
        if config.active_task == "token_classification":
            got, eager, expected = got[kept], np.asarray(eager)[kept], None
            expected = torch_logits(torch_model, ids, padding_mask=padding, token_type_ids=types)[kept]
        else:
            expected = torch_logits(torch_model, ids, padding_mask=padding, token_type_ids=types)
        assert relative_error(got, eager) <= ROUNDING
        assert relative_error(got, expected) <= TWINS
    assert traced.traces - before == 1  # one signature: ids, padding mask, token types
    forward(keras_model, ids)  # ids alone: a second signature, traced once more
    forward(keras_model, ids[:1, :3])
    assert traced.traces - before == 2


def test_zoo_predict_traces_the_keras_twin_once_for_all_its_batches(image_twins, tmp_path, monkeypatch):
    """Five inputs at batch size 2 (2, 2 and a short 1): one trace, and the torch twin's answers."""
    config, torch_model, _ = image_twins
    checkpoint = save_checkpoint(torch_model, tmp_path / "model.safetensors")
    loaded = []
    original = KerasBackend.load
    monkeypatch.setattr(
        KerasBackend, "load", lambda self, opened: loaded.append(original(self, opened)) or loaded[-1]
    )
    x = np.random.default_rng(3).standard_normal((5, 3, 8, 8)).astype(np.float32)
    found = zoo.predict(checkpoint, x, framework="keras", batch_size=2, top_k=config.num_classes)
    assert traced_forward(loaded[0]).traces == 1
    expected = torch_logits(torch_model, x)
    for prediction, row in zip(found, expected, strict=True):
        assert [label["id"] for label in prediction.labels] == np.argsort(-row, kind="stable").tolist()


def test_a_keras_model_from_zoo_load_keeps_its_call_and_runs_traced(image_twins, tmp_path):
    """``model(x)`` stays Keras' eager call; ``forward`` (traced by zoo) and Keras' own compiled
    ``predict`` give its outputs within float32 rounding, ``forward`` with one trace."""
    _, torch_model, _ = image_twins
    model = zoo.load(save_checkpoint(torch_model, tmp_path / "model.safetensors"), "keras")
    x = keras_layout(np.random.default_rng(4).standard_normal((3, 3, 8, 8)).astype(np.float32), "image")
    eager = model(x, training=False)
    assert not isinstance(eager, np.ndarray)  # the call is untouched: a backend tensor
    assert relative_error(forward(model, x), eager) <= ROUNDING
    assert relative_error(forward(model, x[:1]), eager[:1]) <= ROUNDING
    assert relative_error(model.predict(x, batch_size=2, verbose=0), eager) <= ROUNDING
    assert traced_forward(model).traces == 1
