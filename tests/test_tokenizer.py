"""zoo.tokenizer: every kind round-trips text and its own file; the tokenizer travels with a checkpoint;
``zoo tokenizer train`` refuses a vocabulary size past its limit and a file without text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import invoke, one_line_refusal
from click.testing import CliRunner

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import write_checkpoint
from zoo.checkpoint_tokenizer import tokenizer_of
from zoo.limits import MAX_VOCAB_SIZE
from zoo.tokenizer import CharTokenizer, Tokenizer, TokenizerError, load_tokenizer, train_bpe

TEXT = (
    "The if statement is used for conditional execution.\n"
    "It selects exactly one of the suites by evaluating the expressions one by one.\n"
    "  Indented code, tabs\tand unicode: café, naïve, 3 ≤ 4.\n"
) * 20
SAMPLE = "The expressions select\tone suite: café ≤ naïve?\n"


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return train_bpe([TEXT], vocab_size=320)


def test_char_tokenizer_round_trips_text_and_its_file(tmp_path):
    tokenizer = CharTokenizer.of_text(TEXT)
    ids = tokenizer.encode(SAMPLE[:20])
    assert tokenizer.decode(ids) == SAMPLE[:20]
    assert ids == [tokenizer.vocab.index(c) for c in SAMPLE[:20]]
    loaded = load_tokenizer(tokenizer.save(tmp_path))
    assert isinstance(loaded, CharTokenizer) and loaded.vocab == tokenizer.vocab
    # The file is an ordinary Hugging Face tokenizer.json: its own encoder gives the same ids.
    assert loaded.backend.encode(SAMPLE[:20]).ids == ids
    with pytest.raises(TokenizerError, match="outside the vocabulary: '@'"):
        tokenizer.encode("a@b")
    assert tokenizer.extended("a@b").encode("@") == [len(tokenizer.vocab)]


def test_trained_bpe_round_trips_any_text_and_its_file(bpe, tmp_path):
    ids = bpe.encode(SAMPLE)
    assert bpe.decode(ids) == SAMPLE
    assert len(ids) < len(SAMPLE.encode())  # merges learnt from TEXT shorten it
    assert bpe.decode(bpe.encode("never seen: ∑ 😀")) == "never seen: ∑ 😀"  # byte-level: no unknowns
    assert (bpe.pad_id, bpe.eos_id, bpe.cls_id, bpe.sep_id, bpe.mask_id) == (0, 1, 2, 3, 4)
    assert bpe.special_ids == {0, 1, 2, 3, 4}
    loaded = load_tokenizer(bpe.save(tmp_path))
    assert loaded.kind == "bpe" and loaded.encode(SAMPLE) == ids and loaded.vocab_size == bpe.vocab_size


def test_gpt2_vocab_and_merges_files(tmp_path):
    bpe = train_bpe([TEXT], vocab_size=300, special_tokens=["<|endoftext|>"])  # GPT-2's one special
    bpe.backend.model.save(str(tmp_path))  # GPT-2's two files: vocab.json and merges.txt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merges.txt", "vocab.json"]
    for path in (tmp_path, tmp_path / "vocab.json"):
        gpt2 = load_tokenizer(path)
        assert gpt2.encode(SAMPLE) == bpe.encode(SAMPLE)
        assert gpt2.decode(gpt2.encode(SAMPLE)) == SAMPLE
        # <|endoftext|> is an ordinary entry of vocab.json: registered special, never split
        assert gpt2.eos_id == 0 and gpt2.encode("a<|endoftext|>b")[1] == 0 and gpt2.pad_id is None
        assert gpt2.padding_id == 0
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(TokenizerError, match=r"needs merges\.txt next to vocab\.json"):
        load_tokenizer(tmp_path / "vocab.json")


def wordpiece_vocab(path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "if", "state", "##ment", "is", "used", "."]
    path.write_text("\n".join(tokens) + "\n")
    return path, tokens


def test_wordpiece_vocab_txt_with_and_without_lower_casing(tmp_path):
    path, tokens = wordpiece_vocab(tmp_path / "vocab.txt")
    uncased = load_tokenizer(path)
    ids = uncased.encode("The IF statement is used.")
    assert [tokens[i] for i in ids] == ["the", "if", "state", "##ment", "is", "used", "."]
    assert uncased.decode(ids) == "the if statement is used."
    assert (uncased.pad_id, uncased.unk_id, uncased.cls_id, uncased.sep_id, uncased.mask_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    cased = load_tokenizer(path, lowercase=False)
    assert [tokens[i] for i in cased.encode("The if")] == ["[UNK]", "if"]
    pair, types = uncased.encode_for_classification(uncased.encode("the if"), uncased.encode("is"))
    assert [tokens[i] for i in pair] == ["[CLS]", "the", "if", "[SEP]", "is", "[SEP]"]
    assert types == [0, 0, 0, 0, 1, 1]
    assert load_tokenizer(tmp_path).encode("the if") == uncased.encode("the if")  # the folder
    # a tokenizer.json of it keeps the lower-casing
    assert load_tokenizer(cased.save(tmp_path / "saved")).encode("The if") == cased.encode("The if")


def test_unusable_tokenizer_files_are_named(tmp_path):
    with pytest.raises(TokenizerError, match=r"a folder without a tokenizer: expected tokenizer\.json"):
        load_tokenizer(tmp_path)
    with pytest.raises(TokenizerError, match="no such file"):
        load_tokenizer(tmp_path / "missing.json")
    (tmp_path / "vocab.txt").write_text("the\nif\n")
    with pytest.raises(TokenizerError, match=r"without \[PAD\], \[UNK\], \[CLS\], \[SEP\], \[MASK\]"):
        load_tokenizer(tmp_path / "vocab.txt")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"not a Hugging Face tokenizer\.json"):
        load_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(TokenizerError, match=r"data\.lowercase applies to a WordPiece vocab\.txt only"):
        load_tokenizer(tmp_path / "tokenizer.json", lowercase=True)
    with pytest.raises(TokenizerError, match="use at least 261"):
        train_bpe([TEXT], vocab_size=100)


def test_zoo_tokenizer_train_writes_a_tokenizer_json(tmp_path):
    from zoo.cli import main

    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text(TEXT)
    out = tmp_path / "tok.json"
    args = [
        "tokenizer",
        "train",
        str(folder),
        "-o",
        str(out),
        "--vocab-size",
        "300",
        "--special-tokens",
        "<s>,</s>",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "300 tokens" in result.output
    trained = load_tokenizer(out)
    assert trained.vocab_size == 300 and trained.special_ids == {0, 1} and trained.cls_id == 0
    assert trained.decode(trained.encode(SAMPLE)) == SAMPLE
    result = CliRunner().invoke(main, ["tokenizer", "encode", str(out), "the if"])
    assert result.exit_code == 0 and result.output.splitlines()[0] == " ".join(
        map(str, trained.encode("the if"))
    )
    result = CliRunner().invoke(main, ["tokenizer", "train", str(tmp_path / "tok.json"), "--vocab-size", "9"])
    assert result.exit_code == 2 and "use at least" in result.output


def test_zoo_tokenizer_train_into_a_folder_reads_back(tmp_path):
    """-o DIR/ (created) or an existing folder holds tokenizer.json, which zoo reads back by the
    folder's name; a path zoo would not read back is refused before any training."""
    from zoo.cli import main

    text = tmp_path / "a.txt"
    text.write_text(TEXT)
    for given, written in ((f"{tmp_path}/my-bpe/", tmp_path / "my-bpe"), (str(tmp_path), tmp_path)):
        result = CliRunner().invoke(
            main, ["tokenizer", "train", str(text), "-o", given, "--vocab-size", "300"]
        )
        assert result.exit_code == 0, result.output
        assert (written / "tokenizer.json").is_file()
        assert f"wrote {written / 'tokenizer.json'}" in result.stdout
        trained = load_tokenizer(written)
        assert trained.vocab_size == 300 and trained.decode(trained.encode(SAMPLE)) == SAMPLE
        encoded = CliRunner().invoke(main, ["tokenizer", "encode", given, "the if", "--quiet"])
        assert encoded.exit_code == 0 and encoded.stdout.split() == [str(i) for i in trained.encode("the if")]

    old = CliRunner().invoke(main, ["tokenizer", "train", str(text), "--output", f"{tmp_path}/old.json",
                                    "--vocab-size", "300", "--quiet"])  # fmt: skip
    assert old.exit_code == 0 and old.stdout.strip() == f"{tmp_path}/old.json"

    refused = CliRunner().invoke(main, ["tokenizer", "train", str(text), "-o", f"{tmp_path}/plain"])
    assert refused.exit_code == 2
    assert f"give {tmp_path}/plain.json for a file, or {tmp_path}/plain/ for a folder" in refused.stderr
    assert not (tmp_path / "plain").exists()


def test_a_vocabulary_smaller_than_asked_is_said(tmp_path):
    from zoo.cli import main

    text = tmp_path / "a.txt"
    text.write_text(TEXT)
    out = tmp_path / "tok.json"
    result = CliRunner().invoke(
        main, ["tokenizer", "train", str(text), "-o", str(out), "--vocab-size", "5000"]
    )
    assert result.exit_code == 0, result.output
    got = load_tokenizer(out).vocab_size
    assert got < 5000
    assert f"{got} tokens (5000 asked)" in result.stdout
    assert f"has {got} tokens, not the 5000 asked" in result.stderr and "--min-frequency 2" in result.stderr
    scripted = CliRunner().invoke(
        main, ["tokenizer", "train", str(text), "-o", str(out), "--vocab-size", "5000", "--json"]
    )
    document = json.loads(scripted.stdout)
    assert (document["vocab_size"], document["vocab_size_asked"]) == (got, 5000)
    asked_what_it_gets = CliRunner().invoke(
        main, ["tokenizer", "train", str(text), "-o", str(out), "--vocab-size", str(got)]
    )
    assert asked_what_it_gets.exit_code == 0 and "asked" not in asked_what_it_gets.output


def tiny_checkpoint(path, vocab: str | None = None, vocab_size: int = 16):
    from zoo import registry
    from zoo.initial_weights import initial_tensors

    config = registry.resolve_config("transformer-tiny", task="language_modeling", vocab_size=vocab_size)
    tensors = initial_tensors(registry.get_family("transformer"), config, seed=0)
    return write_checkpoint(path / "model.safetensors", config, tensors, framework="lightning", vocab=vocab)


def test_tokenizer_of_a_checkpoint(tmp_path, bpe):
    chars = CharTokenizer.of_text("hello world\n")
    checkpoint = tiny_checkpoint(tmp_path / "char", vocab=chars.vocab)
    found = tokenizer_of(checkpoint)  # today's checkpoints: the characters in the metadata
    assert isinstance(found, CharTokenizer) and found.vocab == chars.vocab
    checkpoint = tiny_checkpoint(tmp_path / "bpe", vocab_size=bpe.vocab_size)
    with pytest.raises(CheckpointError, match="has no tokenizer"):
        tokenizer_of(checkpoint)
    bpe.save(checkpoint.parent)
    assert tokenizer_of(checkpoint).encode(SAMPLE) == bpe.encode(SAMPLE)
    small = tiny_checkpoint(tmp_path / "small", vocab_size=64)
    bpe.save(small.parent)
    with pytest.raises(CheckpointError, match="has 320 tokens but the model's vocab_size is 64"):
        tokenizer_of(small)
    saved = json.loads((checkpoint.parent / "tokenizer.json").read_text())
    assert saved["model"]["type"] == "BPE"  # a plain Hugging Face file


def test_training_saves_the_tokenizer_and_fine_tuning_reuses_it(tmp_path, monkeypatch):
    """A run on BPE text writes tokenizer.json beside its checkpoint; fine-tuning that checkpoint
    on other text tokenizes with it (not with a new BPE), so the ids keep their meaning."""
    import zoo

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text(TEXT)
    second.write_text(TEXT.upper())
    recipe = {
        "model": {"architecture": "transformer-tiny"},
        "data": {
            "name": "text",
            "path": str(first),
            "tokenizer": "bpe",
            "bpe_vocab_size": 300,
            "seq_len": 16,
        },
        "trainer": {"max_epochs": 1, "progress_bar": False},
        "export": {"dir": str(tmp_path / "runs")},
    }
    result = zoo.train(recipe, framework="lightning")
    saved = tokenizer_of(result.checkpoint)
    assert saved.vocab_size == 300 and (result.checkpoint.parent / "tokenizer.json").is_file()
    tuned = zoo.train(
        {**recipe, "data": {**recipe["data"], "path": str(second)}, "init": {"from": str(result.checkpoint)}},
        framework="lightning",
    )
    assert tokenizer_of(tuned.checkpoint).to_json() == saved.to_json()
    assert np.isfinite(tuned.metrics["test_loss"])


def test_a_vocabulary_size_past_the_limit_is_refused_before_the_trainer(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world hello there\n")
    result = invoke("tokenizer", "train", text, "-o", tmp_path / "t.json", "--vocab-size", "99999999999999")
    assert (
        result.exit_code == 2
        and "'--vocab-size'" in result.output
        and f"2<=x<={MAX_VOCAB_SIZE}" in result.output
    )
    done = invoke("tokenizer", "train", text, "-o", tmp_path / "t.json", "--vocab-size", MAX_VOCAB_SIZE)
    assert done.exit_code == 0 and (tmp_path / "t.json").is_file(), done.output


@pytest.mark.parametrize("content", ["", " \n\n\t "])
def test_tokenizer_train_refuses_a_file_without_text(tmp_path, content):
    text = tmp_path / "empty.txt"
    text.write_text(content)
    result = invoke("tokenizer", "train", text, "-o", tmp_path / "t.json")
    one_line_refusal(result, str(text), "no text to learn from")
    assert not (tmp_path / "t.json").exists()
