"""``zoo sample``: token choice (greedy, temperature, top-k, top-p, seed) and generation with and
without a key/value cache, the same text from either twin of one checkpoint; its numbers (length,
temperature, top-p, seed) refused at once past their range, and the settings at their edges."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_helpers import invoke
from click.testing import CliRunner
from conftest import char_checkpoint

import zoo
from zoo.cli import main
from zoo.limits import MAX_SAMPLE_LENGTH
from zoo.sample import PromptError, Sampling, check_length

VOCAB = "\n abcdefghij"


def test_greedy_is_argmax_and_top_k_1_or_a_tiny_top_p_is_greedy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 50))
    best = np.argmax(logits, axis=-1).tolist()
    assert Sampling().choose(logits, rng).tolist() == best
    assert Sampling(temperature=5.0, top_k=1).choose(logits, rng).tolist() == best
    assert Sampling(temperature=5.0, top_p=1e-9).choose(logits, rng).tolist() == best


def test_top_k_and_top_p_draw_only_from_their_sets():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    rng = np.random.default_rng(0)
    top_k = {int(Sampling(temperature=1.0, top_k=2).choose(logits, rng)[0]) for _ in range(300)}
    assert top_k == {0, 1}
    top_p = {int(Sampling(temperature=1.0, top_p=0.9).choose(logits, rng)[0]) for _ in range(300)}
    assert top_p == {0, 1, 2}  # 0.5 + 0.3 < 0.9 <= 0.5 + 0.3 + 0.15
    everything = {int(Sampling(temperature=1.0).choose(logits, rng)[0]) for _ in range(300)}
    assert everything == {0, 1, 2, 3}


def test_a_seed_repeats_its_draws_and_bad_settings_are_refused():
    logits = np.random.default_rng(1).normal(size=(1, 30))
    draws = [
        [int(Sampling(temperature=1.5).choose(logits, rng)[0]) for _ in range(20)]
        for rng in (np.random.default_rng(7), np.random.default_rng(7))
    ]
    assert draws[0] == draws[1]
    for bad, message in (
        (dict(temperature=-1.0), "temperature must be >= 0"),
        (dict(top_k=0), "top_k must be >= 1"),
        (dict(top_p=0.0), r"top_p must lie in \(0, 1\]"),
    ):
        with pytest.raises(PromptError, match=message):
            Sampling(**bad)


def _checkpoint(tmp_path, name: str, **fields):
    """A character LM of ``name`` with random weights (all of them non-trivial), saved with VOCAB."""
    return char_checkpoint(tmp_path, name, VOCAB, **fields)


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("gpt2-micro", {"n_positions": 16}),  # the cache, then past 16 tokens the re-read window
        ("transformer-tiny", {"task": "language_modeling", "max_len": 16}),  # the re-read window
    ],
)
@pytest.mark.parametrize("sampling", [[], ["--temperature", "0.8", "--top-k", "5", "--top-p", "0.9"]])
def test_both_twins_write_the_same_text(tmp_path, name, fields, sampling):
    checkpoint = _checkpoint(tmp_path, name, **fields)
    texts = []
    for framework in ("lightning", "keras"):
        args = ["sample", str(checkpoint), "--prompt", "abc", "--length", "24", "--framework", framework]
        result = CliRunner().invoke(main, [*args, *sampling, "--seed", "3"])
        assert result.exit_code == 0, result.output
        texts.append(result.output.rstrip("\n"))
    assert texts[0] == texts[1]
    assert texts[0].startswith("abc") and len(texts[0]) == 3 + 24
    assert set(texts[0]) <= set(VOCAB)


def test_the_cache_writes_what_rereading_writes(tmp_path):
    """GPT-2's decode cache against re-reading the whole window every step (the same model with
    its ``decode`` hidden): the same greedy text."""
    from zoo.sample import generate

    checkpoint = _checkpoint(tmp_path, "gpt2-micro", n_positions=16)
    model = zoo.load_checkpoint(checkpoint, framework="lightning")
    prompt = np.array([[2, 3, 4, 5]])
    cached = generate(model, prompt, 20, Sampling())

    class Rereading(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.zoo_config = inner, inner.zoo_config

        def forward(self, ids):
            return self.inner(ids)

    assert generate(Rereading(model), prompt, 20, Sampling()).tolist() == cached.tolist()


def test_a_prompt_outside_the_vocabulary_is_refused(tmp_path):
    checkpoint = _checkpoint(tmp_path, "gpt2-micro", n_positions=16)
    result = CliRunner().invoke(main, ["sample", str(checkpoint), "--prompt", "xyz", "--length", "2"])
    assert result.exit_code == 2
    assert "the prompt cannot be encoded" in result.output and "xyz" in result.output


def _sampled(checkpoint, framework: str, *extra: str) -> dict:
    import json

    args = [
        "sample",
        str(checkpoint),
        "--prompt",
        "abc",
        "--length",
        "12",
        "--framework",
        framework,
        "--json",
    ]
    result = CliRunner().invoke(main, [*args, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _eos_position(ids: list[int]) -> int:
    """A position past the first whose id appears there first (greedy generation reaches it),
    and is none of the prompt's."""
    prompt = [VOCAB.index(c) for c in "abc"]
    return next(i for i in range(2, len(ids)) if ids[i] not in ids[:i] + prompt)


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_greedy_sampling_stops_at_the_config_s_eos_token(tmp_path, framework):
    """llama's eos_token_id (config.json's): generation stops at the first one, which the ids
    keep; --ignore-eos goes on to --length; --json says why it stopped."""
    from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint

    plain = _checkpoint(tmp_path, "llama-micro")
    free = _sampled(plain, framework)
    assert free["stop"] == "length" and len(free["ids"]) == 12  # no eos_token_id: no stop
    stop = _eos_position(free["ids"])
    opened = read_checkpoint(plain)
    config = opened.config.model_copy(update={"eos_token_id": free["ids"][stop]})
    ended = write_checkpoint(
        tmp_path / "eos.safetensors", config, opened.tensors(), framework="lightning", vocab=VOCAB
    )
    done = _sampled(ended, framework)
    assert done["ids"] == free["ids"][: stop + 1] and done["stop"] == "eos"
    assert done["text"] == "abc" + "".join(VOCAB[i] for i in done["ids"])
    assert _sampled(ended, framework, "--ignore-eos")["ids"] == free["ids"]


def test_greedy_sampling_stops_at_the_tokenizer_s_end_of_text(tmp_path):
    """GPT-2 names no eos_token_id: its tokenizer's <|endoftext|> is where generation stops."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    checkpoint = _checkpoint(tmp_path, "gpt2-micro", n_positions=16)
    free = _sampled(checkpoint, "lightning")
    stop = _eos_position(free["ids"])
    end = free["ids"][stop]
    vocab = {c: i for i, c in enumerate(VOCAB) if i != end} | {"<|endoftext|>": end}
    backend = Backend(models.WordLevel(vocab, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(["<|endoftext|>"])
    backend.save(str(tmp_path / "tokenizer.json"))
    done = _sampled(checkpoint, "lightning")
    assert done["ids"] == free["ids"][: stop + 1] and done["stop"] == "eos"


def test_a_tokenizer_smaller_than_the_model_s_vocabulary_is_one_line(tmp_path):
    """A GPT-2 checkpoint whose character vocabulary lacks the ids the model writes: exit 2 and
    one line, not an IndexError."""
    from zoo.checkpoint.metadata import write_checkpoint
    from zoo.initial_weights import initial_tensors

    config = zoo.registry.resolve_config("gpt2-micro", n_layer=1, vocab_size=211)
    family = zoo.registry.get_family("gpt2")
    tensors = initial_tensors(family, config, 0)
    tensors["wte.weight"][len(VOCAB) :] *= 50  # the ids past the vocabulary are the likeliest
    path = write_checkpoint(tmp_path / "g.safetensors", config, tensors, framework="lightning", vocab=VOCAB)
    result = CliRunner().invoke(main, ["sample", str(path), "--prompt", "ab", "--length", "20"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "outside the character vocabulary" in lines[0], result.output


@pytest.mark.parametrize(
    ("args", "option", "allowed"),
    [
        (["--length", "1000000000000"], "--length", f"1<=x<={MAX_SAMPLE_LENGTH}"),
        (["--length", "1000000000"], "--length", f"1<=x<={MAX_SAMPLE_LENGTH}"),
        (["--length", str(MAX_SAMPLE_LENGTH + 1)], "--length", f"1<=x<={MAX_SAMPLE_LENGTH}"),
        (["--temperature", "nan"], "--temperature", "'nan' is not a finite number"),
        (["--temperature", "inf"], "--temperature", "'inf' is not a finite number"),
        (["--temperature", "-1"], "--temperature", "x>=0"),
        (["--top-p", "nan"], "--top-p", "'nan' is not a finite number"),
        (["--seed", "-1"], "--seed", f"0<=x<={2**32 - 1}"),
        (["--seed", str(2**32)], "--seed", f"0<=x<={2**32 - 1}"),
    ],
)
def test_sample_numbers_past_their_range_are_refused_at_once(tmp_path, args, option, allowed):
    # The checkpoint does not exist: the option is refused before anything is read.
    result = invoke("sample", tmp_path / "none.safetensors", *args)
    assert result.exit_code == 2 and f"'{option}'" in result.output and allowed in result.output, (
        result.output
    )
    assert "Traceback" not in result.output


def test_sampling_settings_at_their_edges():
    check_length(MAX_SAMPLE_LENGTH)
    with pytest.raises(PromptError, match=r"length must lie in 1 \.\. 100,000 tokens, got 1,000,000,000"):
        check_length(10**9)
    assert Sampling(seed=2**32 - 1).seed == 2**32 - 1
    for bad in ({"seed": -1}, {"seed": 2**32}, {"temperature": float("nan")}, {"temperature": float("inf")}):
        with pytest.raises(
            PromptError, match=r"seed must lie in 0 \.\. 4294967295|temperature must be >= 0 and finite"
        ):
            Sampling(**bad)
    logits = np.array([[0.5, 3.0, -1.0, 2.9]])
    for temperature in (1e-320, 5e-324):  # subnormal: logits / t overflow to inf
        chosen = Sampling(temperature=temperature, seed=1).choose(logits, np.random.default_rng(1))
        assert chosen.tolist() == [1]


def test_many_prompts_without_a_cache_go_in_batches_of_one_length(tmp_path):
    """A model that re-reads its window (no key/value cache) takes no padding: a list of prompts
    of several lengths goes in batches of one length, each text the prompt's alone, in order."""
    from zoo.sample import sample_tokens

    checkpoint = _checkpoint(tmp_path, "transformer-tiny", task="language_modeling", max_len=16)
    prompts = ["ab", "abc", "b", "ca", "", "j"]
    settings = dict(temperature=0.9, seed=4, repetition_penalty=1.2)
    together = sample_tokens(checkpoint, prompts, 6, batch_size=2, **settings)
    assert together == [sample_tokens(checkpoint, prompt, 6, **settings) for prompt in prompts]
    assert [each.text[: len(prompt)] for each, prompt in zip(together, prompts, strict=True)] == prompts
