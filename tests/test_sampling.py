"""Sampling with one meaning in both twins, and many prompts at once (issue 41, items 2 and 3).

The oracle is ``tests/reference/hf_sampling.py``, run once in the reference environment:

- the scores of transformers' ``LogitsProcessorList``, as its ``generate`` builds it
  (``_get_logits_processor``: repetition penalty, temperature, top-k, top-p), on random logits
  and left-padded ids: zoo's :meth:`Sampling.scores` give the same distribution and filter the
  same tokens, so the same uniform draws choose the same tokens;
- greedy ``generate`` with ``repetition_penalty`` 1.5 on a tiny random GPT-2 (left-padded ids,
  attention mask) and on a tiny random Llama with a character tokenizer (texts through the
  tokenizer with left padding): zoo's twins, through ``zoo.sample`` and ``zoo sample --prompts``,
  give the same tokens, the prompts batched.

Without an oracle (transformers draws a batch from one stream; zoo gives each row its own, so a
prompt's tokens are its own alone): a batched row equals its prompt alone and both twins equal
each other, greedy and sampled; stop strings end each row and cut its text.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import reference_env
from click.testing import CliRunner

import zoo
from zoo.cli import main
from zoo.interchange.importing import import_checkpoint
from zoo.sample import generate, sample_tokens
from zoo.sampling import PromptError, Sampling, seen_tokens

FRAMEWORKS = ("lightning", "keras")
PENALTY = 1.5  # hf_sampling.PENALTY


@pytest.fixture(scope="module")
def reference():
    return reference_env.fixtures("hf_sampling.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory):
    root = tmp_path_factory.mktemp("imported")
    return {name: import_checkpoint(reference / name, root / name).path for name in ("gpt2", "llama")}


@pytest.fixture(scope="module")
def gpt2(imported):
    return {framework: zoo.load_checkpoint(imported["gpt2"], framework=framework) for framework in FRAMEWORKS}


def _sampling(setting: dict) -> Sampling:
    return Sampling(**{"temperature": 0.0, **setting})


def test_scores_are_transformers_logits_processors(reference):
    """Each setting's scores against transformers': the same tokens filtered out, the same
    probabilities (greedy: the same penalised logits), so that the same uniform numbers draw
    the same tokens."""
    arrays = np.load(reference / "scores.npz")
    logits, ids, padding = arrays["logits"], arrays["ids"], arrays["padding"]
    seen = seen_tokens(ids, padding, logits.shape[-1])
    for i, setting in enumerate(json.loads((reference / "settings.json").read_text())):
        sampling, expected = _sampling(setting), arrays[f"processed-{i}"].astype(np.float64)
        got = sampling.scores(logits, seen)
        assert np.array_equal(np.isinf(got), np.isinf(expected)), setting
        if sampling.greedy:
            np.testing.assert_allclose(got, expected, rtol=1e-6)
            assert sampling.choose(logits, np.random.default_rng(0), seen).tolist() == list(
                expected.argmax(-1)
            )
            continue
        assert np.isinf(expected).any() == ("top_k" in setting or "top_p" in setting), setting
        probabilities = np.exp(expected - expected.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        ours = np.exp(got - got.max(-1, keepdims=True))
        np.testing.assert_allclose(ours / ours.sum(-1, keepdims=True), probabilities, rtol=1e-5, atol=1e-9)
        for seed in range(20):
            uniforms = [np.random.default_rng(seed).random() for _ in ids]
            theirs = [
                int(np.searchsorted(np.cumsum(p), u, side="right"))
                for p, u in zip(probabilities, uniforms, strict=True)
            ]
            rngs = [np.random.default_rng(seed) for _ in ids]
            assert sampling.choose(logits, rngs, seen).tolist() == theirs, (setting, seed)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_penalised_greedy_generation_is_transformers(reference, gpt2, framework):
    """Left-padded ids through the key/value cache with the repetition penalty: transformers'
    batched generate (attention mask, padding not penalised), token for token."""
    prompts, padding = np.load(reference / "gpt2-prompts.npy"), np.load(reference / "gpt2-prompt-padding.npy")
    expected = np.load(reference / "gpt2-penalised.npy")
    got = generate(
        gpt2[framework], prompts, expected.shape[1], Sampling(repetition_penalty=PENALTY), None, padding
    )
    assert got.tolist() == expected.tolist()
    plain = generate(gpt2[framework], prompts, expected.shape[1], Sampling(), None, padding)
    assert plain.tolist() != expected.tolist()  # the penalty changed something


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_many_texts_are_transformers_batched_generate(reference, imported, framework):
    """``zoo.sample``'s list of prompts (tokenized, left-padded in batches of 2) against the
    tokenizer's left padding and transformers' batched greedy generate, plain and penalised."""
    expected = json.loads((reference / "llama-texts.json").read_text())
    texts = expected["texts"]
    for name, penalty in (("plain", 1.0), ("penalised", PENALTY)):
        done = sample_tokens(
            imported["llama"], texts, 10, framework=framework, ignore_eos=True, repetition_penalty=penalty,
            batch_size=2,
        )  # fmt: skip
        assert [each.ids for each in done] == expected[name], name
        assert all(
            each.stop == "length" and each.text.startswith(text)
            for each, text in zip(done, texts, strict=True)
        )


@pytest.mark.parametrize(
    "setting", [{}, {"temperature": 3.0, "top_k": 30, "top_p": 0.95, "repetition_penalty": 1.3}]
)
def test_a_batched_row_is_its_prompt_alone_and_the_twins_agree(reference, gpt2, setting):
    """Each left-padded row's tokens are what its prompt alone (no padding) gives, greedy and
    sampled with one seed, in both twins; and both twins give the same tokens."""
    prompts, padding = np.load(reference / "gpt2-prompts.npy"), np.load(reference / "gpt2-prompt-padding.npy")
    sampling = Sampling(seed=5, **setting)
    batched = {f: generate(gpt2[f], prompts, 8, sampling, None, padding).tolist() for f in FRAMEWORKS}
    assert batched["lightning"] == batched["keras"]
    if setting:  # sampling drew something else than greedy
        assert batched["keras"] != generate(gpt2["keras"], prompts, 8, Sampling(), None, padding).tolist()
    for framework in FRAMEWORKS:
        for row in range(len(prompts)):
            alone = generate(gpt2[framework], prompts[row : row + 1, padding[row].sum() :], 8, sampling)
            assert alone[0].tolist() == batched[framework][row], (framework, row)


def test_stop_strings_end_each_row_and_cut_its_text(imported):
    """A stop string ends its row just after the token that completes it (the text cut just
    after the string); the other rows go on as without it; a stop string in the prompt alone
    stops nothing."""
    texts = ["Hello there, ", "a", "The cat sat on the mat. The cat"]
    free = sample_tokens(imported["llama"], texts, 12, ignore_eos=True, repetition_penalty=PENALTY)
    generated = [each.text[len(text) :] for each, text in zip(free, texts, strict=True)]
    stop = generated[1][3:5]  # ends at the 5th new token of row 1 (or earlier: found first)
    cut = [min((g.find(s) + len(s) for s in (stop, "cat") if s in g), default=None) for g in generated]
    assert cut[1] is not None and cut[1] <= 5
    done = sample_tokens(
        imported["llama"], texts, 12, framework="keras", ignore_eos=True, repetition_penalty=PENALTY,
        stop=[stop, "cat"],
    )  # fmt: skip
    for text, each, alone, end in zip(texts, done, free, cut, strict=True):
        if end is None:  # "cat" is in the prompt only
            assert each == alone
        else:  # one character a token
            assert each.text == text + alone.text[len(text) :][:end] and each.stop == "stop"
            assert each.ids == alone.ids[:end]


def _written(tmp_path, lines: str):
    path = tmp_path / "prompts.txt"
    path.write_text(lines)
    return path


def test_zoo_sample_reads_a_file_of_prompts(reference, imported, tmp_path):
    """``--prompts FILE`` (and ``-``, stdin): one completion per line, blank lines skipped,
    transformers' tokens; --json a list, text blocks each under ``--- N ---``."""
    expected = json.loads((reference / "llama-texts.json").read_text())
    texts = expected["texts"]
    prompts = _written(tmp_path, "\n".join([texts[0], "", *texts[1:]]) + "\n")
    args = ["sample", str(imported["llama"]), "--length", "10", "--ignore-eos", "--batch-size", "2"]
    result = CliRunner().invoke(
        main, [*args, "--prompts", str(prompts), "--repetition-penalty", "1.5", "--json"]
    )
    assert result.exit_code == 0, result.output
    documents = json.loads(result.stdout)
    assert [d["prompt"] for d in documents] == texts
    assert [d["ids"] for d in documents] == expected["penalised"]
    plain = CliRunner().invoke(main, [*args, "--prompts", "-", "--stop", "zzz"], input=prompts.read_text())
    assert plain.exit_code == 0, plain.output
    blocks = plain.stdout.split("--- ")[1:]
    assert [b.split(" ---\n", 1)[0] for b in blocks] == ["1", "2", "3"]
    assert all(b.split(" ---\n", 1)[1].startswith(text) for b, text in zip(blocks, texts, strict=True))


@pytest.mark.parametrize(
    ("lines", "extra", "message"),
    [
        ("\n\n", [], "has no prompts: write one a line"),
        ("ok\n" + "a" * 80 + "\n", [], "prompt 2 of 2 is 80 tokens, longer than the model's context of 64"),
        ("ok\n", ["--prompt", "x"], "give --prompt or --prompts, not both"),
        ("ok\n", ["--repetition-penalty", "0"], "'--repetition-penalty'"),
    ],
)
def test_bad_prompt_files_and_settings_are_one_line(imported, tmp_path, lines, extra, message):
    prompts = _written(tmp_path, lines)
    result = CliRunner().invoke(main, ["sample", str(imported["llama"]), "--prompts", str(prompts), *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_settings_are_checked():
    for bad, message in (
        ({"repetition_penalty": 0.0}, r"repetition_penalty must lie in \(0, 100\]"),
        ({"repetition_penalty": float("nan")}, "repetition_penalty must lie in"),
    ):
        with pytest.raises(PromptError, match=message):
            Sampling(**bad)
    with pytest.raises(PromptError, match="no prompts given"):
        sample_tokens("unread.safetensors", [])
    with pytest.raises(PromptError, match="stop strings must be non-empty"):
        sample_tokens("unread.safetensors", "a", stop=[""])
