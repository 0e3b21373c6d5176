"""The Keras twin's compiled generation (issue 41): the prompt read in one traced call into a
static key/value cache, then a decode step traced once per model, writing one token a call at a
position passed as a tensor.

For each decoder family, with left-padded prompts, greedy and seeded sampling: the compiled Keras
twin writes the torch twin's tokens and the eager Keras decode's (the path it replaced), with
the same logits; its decode step is not traced again for another token, prompt length, batch or
generation length; and past the context, generation re-reads the last window as before.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from conftest import cached_logits, perturbed_twins, relative_error

from zoo.sample import Sampling, generate

CONTEXT = 24
FAMILIES = {
    "gpt2": (
        "gpt2-micro",
        {"resid_dropout": 0.0, "embd_dropout": 0.0, "attn_dropout": 0.0, "n_positions": CONTEXT},
    ),
    "llama": ("llama-micro", {"max_position_embeddings": CONTEXT}),
    "llama-untied-mqa": (
        "llama-micro",
        {"max_position_embeddings": CONTEXT, "num_key_value_heads": 1, "tie_word_embeddings": False},
    ),
    "windowed-layer": (  # a sliding window on the second layer only, as Qwen2's max_window_layers sets
        "llama-micro",
        {
            "max_position_embeddings": CONTEXT,
            "sliding_window": 4,
            "layer_types": ["full_attention", "sliding_attention"],
        },
    ),
}
SAMPLINGS = {"greedy": Sampling(), "sampled": Sampling(temperature=0.9, top_k=20, top_p=0.95, seed=7)}
ROUNDING = 1e-5  # compiled against eager Keras logits: float32 rounding (the sums' order differs)
TWINS = 1e-4  # against the torch twin's


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def twins(request):
    name, fields = FAMILIES[request.param]
    config, torch_model, keras_model = perturbed_twins(name, vocab_size=97, **fields)
    return config, torch_model, keras_model


@contextmanager
def eager(model):
    """The Keras twin through its eager ``decode`` (a cache grown by concatenation each token)."""
    model.compiled_generation = False
    try:
        yield model
    finally:
        model.compiled_generation = True


def left_padded(vocab_size: int, rows: int = 3, steps: int = 7, seed: int = 0):
    ids = np.random.default_rng(seed).integers(0, vocab_size, size=(rows, steps))
    padding = np.zeros(ids.shape, bool)
    for row in range(1, rows):
        padding[row, : 2 * row] = True
    return ids, padding


@pytest.mark.parametrize("sampling", sorted(SAMPLINGS))
def test_compiled_tokens_are_the_torch_twins_and_the_eager_ones(twins, sampling):
    config, torch_model, keras_model = twins
    prompts, padding = left_padded(config.vocab_size)
    how = SAMPLINGS[sampling]
    expected = generate(torch_model, prompts, 12, how, padding_mask=padding)
    compiled = generate(keras_model, prompts, 12, how, padding_mask=padding)
    with eager(keras_model):
        before = generate(keras_model, prompts, 12, how, padding_mask=padding)
    assert compiled.tolist() == expected.tolist() == before.tolist()
    unpadded = generate(keras_model, prompts[:1], 12, how)
    assert unpadded.tolist() == generate(torch_model, prompts[:1], 12, how).tolist()


def test_compiled_logits_are_the_eager_decodes(twins):
    """Prefill and each decode step: the eager decode's logits within float32 rounding, and the
    torch twin's cached logits within the twins' tolerance."""
    config, torch_model, keras_model = twins
    ids, padding = left_padded(config.vocab_size, steps=14)
    prompt = 6
    logits, cache = keras_model.prefill(ids[:, :prompt], padding[:, :prompt], max_length=ids.shape[1])
    heads = getattr(config, "key_value_heads", getattr(config, "n_head", None))
    assert tuple(cache.layers[0][0].shape)[:3] == (3, heads, 14)
    steps = [np.asarray(logits)]
    for t in range(prompt, ids.shape[1]):
        logits, cache = keras_model.decode_step(ids[:, t : t + 1], cache)
        steps.append(np.asarray(logits))
    assert cache.length == cache.max_length == ids.shape[1]
    compiled = np.stack(steps, axis=1)
    before, _ = cached_logits(keras_model, ids, padding, prompt)
    assert relative_error(compiled, before) <= ROUNDING
    torch_logits, _ = cached_logits(torch_model, ids, padding, prompt)
    assert relative_error(compiled, torch_logits) <= TWINS
    with pytest.raises(ValueError, match="slots are all written"):
        keras_model.decode_step(ids[:, :1], cache)


def test_the_decode_step_is_traced_once(twins):
    """Tokens, prompt lengths, batch sizes, generation lengths and padding or none: one trace of
    the prefill, one of the decode step (sampling) and one of the greedy loop, for the model's
    whole life (a trace per token would count one per token here)."""
    config, _, keras_model = twins
    functions = keras_model.compiled_generation_functions()
    for rows, steps, new, seed in ((3, 7, 9, 0), (2, 4, 13, 1), (1, 9, 5, 2)):
        prompts, padding = left_padded(config.vocab_size, rows, steps, seed)
        generate(keras_model, prompts, new, Sampling(), padding_mask=padding)
        generate(keras_model, prompts, new, SAMPLINGS["sampled"])
    assert {k: functions.traces[k] for k in ("prefill", "step", "greedy")} == {
        "prefill": 1,
        "step": 1,
        "greedy": 1,
    }
    assert functions.prefill.experimental_get_tracing_count() == 1
    assert functions._step.experimental_get_tracing_count() == 1
    assert functions.greedy.experimental_get_tracing_count() == 1
    assert keras_model.compiled_generation_functions() is functions  # kept while the weights are


def test_the_greedy_loop_is_the_step_by_step_one(twins):
    """The one traced greedy loop against the prefill + decode steps it replaces (a repetition
    penalty of 1 + 1e-9 sends generate through those, with the same greedy choice at these
    logits) and the torch twin: the same tokens, ending where every row has met an end id."""
    config, torch_model, keras_model = twins
    prompts, padding = left_padded(config.vocab_size, rows=3, steps=5, seed=4)
    stepwise = Sampling(repetition_penalty=1 + 1e-9)
    whole = generate(keras_model, prompts, 15, Sampling(), padding_mask=padding)
    assert whole.shape == (3, 15)
    assert whole.tolist() == generate(keras_model, prompts, 15, stepwise, padding_mask=padding).tolist()
    # an end id from each row (its 3rd, 6th and 4th token): the loop stops once all have met one
    eos = {int(whole[0, 2]), int(whole[1, 5]), int(whole[2, 3])}
    stops = max(int(np.isin(row, list(eos)).nonzero()[0][0]) + 1 for row in whole)
    early = generate(keras_model, prompts, 15, Sampling(), padding_mask=padding, eos=eos)
    assert stops <= 6 and early.shape == (3, stops)
    assert early.tolist() == whole[:, :stops].tolist()
    expected = generate(torch_model, prompts, 15, Sampling(), padding_mask=padding, eos=eos)
    assert early.tolist() == expected.tolist()
    assert keras_model.compiled_generation_functions().traces["greedy"] == 1


@contextmanager
def xla_allowed():
    """TensorFlow's op determinism off, as it was before an earlier deterministic run in this
    process turned it on: while it is on, Keras refuses ``jit_compile = True`` (with a warning),
    and the greedy loop rightly stays the plain graph."""
    from tensorflow.python.framework import config

    deterministic = config.is_op_determinism_enabled()
    config.disable_op_determinism()
    try:
        yield
    finally:
        if deterministic:
            config.enable_op_determinism()


def test_with_jit_compile_the_greedy_loop_runs_under_xla_to_the_same_tokens(twins):
    """A model whose ``jit_compile`` is True (Keras' "auto" on a GPU; False on this CPU) runs the
    greedy loop XLA-compiled: the same tokens, and the checks XLA would drop made before it."""
    from zoo.nn.errors import InputError

    config, torch_model, keras_model = twins
    prompts, padding = left_padded(config.vocab_size, rows=3, steps=5, seed=5)
    resolved = keras_model.jit_compile  # Keras' "auto": False on a machine without an accelerator
    with xla_allowed():
        try:
            keras_model.jit_compile = False
            plain = generate(keras_model, prompts, 10, Sampling(), padding_mask=padding)
            keras_model.jit_compile = True
            assert keras_model.jit_compile
            compiled = generate(keras_model, prompts, 10, Sampling(), padding_mask=padding)
            with pytest.raises(InputError, match="token ids must lie in"):
                keras_model.greedy(np.array([[1, config.vocab_size]]), length=2)
            with pytest.raises(ValueError, match="do not fit the context"):
                keras_model.greedy(prompts, padding, CONTEXT)
        finally:
            keras_model.jit_compile = resolved
    assert compiled.tolist() == plain.tolist()
    assert compiled.tolist() == generate(torch_model, prompts, 10, Sampling(), padding_mask=padding).tolist()
    assert keras_model.compiled_generation_functions().traces["greedy_xla"] == 1


@pytest.mark.parametrize("steps", [20, 30])
def test_past_the_context_the_last_window_is_read_again(twins, steps):
    """A prompt near (or past) the context and more tokens than fit: the static cache fills, then
    every step re-reads the last ``CONTEXT`` tokens, as the eager decode and the torch twin do."""
    config, torch_model, keras_model = twins
    prompts, padding = left_padded(config.vocab_size, rows=2, steps=steps)
    expected = generate(torch_model, prompts, 10, Sampling(), padding_mask=padding)
    compiled = generate(keras_model, prompts, 10, Sampling(), padding_mask=padding)
    with eager(keras_model):
        before = generate(keras_model, prompts, 10, Sampling(), padding_mask=padding)
    assert compiled.tolist() == expected.tolist() == before.tolist()


REREADING = {
    "transformer": ("transformer-tiny", {"max_len": 16, "dropout": 0.0}),  # past its window too
    "lstm": ("lstm-small", {}),
}


@pytest.mark.parametrize("sampling", sorted(SAMPLINGS))
@pytest.mark.parametrize("family", sorted(REREADING))
def test_a_model_without_a_cache_reads_its_window_in_one_traced_call(family, sampling):
    """A language model without a cache (the transformer family's, the recurrent nets) re-reads
    its last window each step: through one traced call (one trace for every length), the torch
    twin's and the eager call's tokens, before and past the window."""
    from zoo.nn.keras.decoder import last_logits_function

    name, fields = REREADING[family]
    config, torch_model, keras_model = perturbed_twins(
        name, task="language_modeling", vocab_size=97, **fields
    )
    prompts = np.random.default_rng(0).integers(0, config.vocab_size, size=(2, 5))
    how = SAMPLINGS[sampling]
    expected = generate(torch_model, prompts, 20, how)
    compiled = generate(keras_model, prompts, 20, how)
    with eager(keras_model):
        before = generate(keras_model, prompts, 20, how)
    assert compiled.tolist() == expected.tolist() == before.tolist()
    call = last_logits_function(keras_model)
    assert call.traced.experimental_get_tracing_count() == 1  # windows of 5 .. 16 tokens, 2 samplings


def test_a_prompt_outside_the_vocabulary_is_refused_in_zoos_words(twins):
    """The traced prefill fails inside a graph; the error is zoo's InputError again, with the
    eager decode's and the torch twin's message."""
    from zoo.nn.errors import InputError

    config, torch_model, keras_model = twins
    prompts = np.array([[1, 2, config.vocab_size]])
    messages = []
    for model in (torch_model, keras_model):
        with pytest.raises(InputError) as refused:
            generate(model, prompts, 3, Sampling())
        messages.append(str(refused.value))
    assert messages[0] == messages[1] and "token ids must lie in" in messages[1]
