"""The torch twins' key/value cache written in place (``zoo.nn.cache.KeyValueSlots``, issue 41):
each decode step's logits stay the full forward's at that position, across the buffers'
growth, and a cache extended twice (two continuations of one prompt) keeps both right.
Generation against transformers' is tests/test_llama.py's and tests/test_gpt2.py's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import cached_logits, relative_error
from conftest import eval_output as run

from zoo import registry
from zoo.nn.cache import KeyValueSlots

TWINS = 1e-5  # relative: the cached logits against the same twin's full forward (float32)
CONTEXT = 160  # past two doublings of the slots (64 -> 128 -> 160)
GPT2_DROPOUT_OFF = {"resid_dropout": 0.0, "embd_dropout": 0.0, "attn_dropout": 0.0}


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def twin(request):
    """The torch twin only (no TensorFlow to import), every parameter moved off its init."""
    if request.param == "llama":
        name, fields = "llama-micro", {"max_position_embeddings": CONTEXT}
    else:
        name, fields = "gpt2-micro", {"n_positions": CONTEXT, **GPT2_DROPOUT_OFF}
    config = registry.resolve_config(name, vocab_size=97, **fields)
    torch.manual_seed(0)
    model = registry.get_family(name).build_torch(config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return config, model


def test_cached_logits_are_the_full_forward_as_the_slots_grow(twin):
    config, model = twin
    ids = np.random.default_rng(0).integers(0, config.vocab_size, size=(2, CONTEXT))
    padding = np.zeros_like(ids, bool)
    padding[1, :3] = True
    got, cache = cached_logits(model, ids, padding, prompt=5)
    assert relative_error(got, run(model, ids, padding)[:, 4:]) <= TWINS
    slots = cache.layers[0]
    assert isinstance(slots, KeyValueSlots) and slots.length == CONTEXT
    assert slots.keys.shape[2] == CONTEXT and slots.slots.keys.shape[2] == CONTEXT  # capped at the context


def test_the_next_token_is_written_into_the_same_buffers(twin):
    """In place: while there is room, a step's cache holds the previous step's tensors, not copies."""
    config, model = twin
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, config.vocab_size, size=(1, 6)))
    with torch.no_grad():
        _, first = model.decode(ids[:, :5])
        _, second = model.decode(ids[:, 5:], first)
    for before, after in zip(first.layers, second.layers, strict=True):
        assert after.slots is before.slots and (before.length, after.length) == (5, 6)
        assert after.keys.data_ptr() == before.keys.data_ptr()


def test_a_cache_extended_twice_keeps_both_continuations(twin):
    """Two continuations of one prompt (the second must not overwrite the first's slots), then
    each continued again: every logit is the full forward's of its own sequence."""
    config, model = twin
    rng = np.random.default_rng(2)
    prompt = rng.integers(0, config.vocab_size, size=(1, 7))
    a, b, x = (rng.integers(0, config.vocab_size, size=(1, 1)) for _ in range(3))
    as_torch = torch.from_numpy
    with torch.no_grad():
        _, shared = model.decode(as_torch(prompt))
        _, after_a = model.decode(as_torch(a), shared)
        _, after_b = model.decode(as_torch(b), shared)
        continued = {"a": model.decode(as_torch(x), after_a)[0], "b": model.decode(as_torch(x), after_b)[0]}
    for name, token in (("a", a), ("b", b)):
        full = run(model, np.concatenate([prompt, token, x], axis=1), None)[:, -1]
        assert relative_error(continued[name].numpy(), full) <= TWINS, name
