"""Text data: packing for language models, labelled CSV/JSONL with padding and masks, masked-LM
masks, and the same batches and losses in both frameworks; a text file without text, or too short
for a test split, named in one line."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import invoke, one_line_refusal

from zoo import registry
from zoo.data import IGNORE_INDEX, DataError, load_dataset
from zoo.recipe.data import TextClassificationData, TextData
from zoo.tokenizer import CharTokenizer, train_bpe

LM_RECIPE = Path(__file__).parent.parent / "recipes" / "lstm-charlm.yaml"
SENTENCES = [
    ("the if statement selects one suite", "statement"),
    ("a while loop repeats its suite", "statement"),
    ("an expression yields a value when evaluated", "expression"),
    ("binary operators combine two operands into one value", "expression"),
    ("the for statement iterates over the items of any sequence in order", "statement"),
    ("comparisons yield boolean values true or false", "expression"),
]


@pytest.fixture(autouse=True)
def bpe_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))


def write_csv(path, rows, header="text,label"):
    path.write_text(header + "\n" + "".join(f'"{t}",{label}\n' for t, label in rows))
    return path


def labelled(tmp_path, **fields):
    path = write_csv(tmp_path / "labelled.csv", SENTENCES * 4)
    return TextClassificationData(path=path, **{"bpe_vocab_size": 300, **fields})


# ------------------------------------------------------------------------------ language modeling


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_a_language_models_bits_are_per_token_for_bpe_and_per_character_for_characters(
    tmp_path, framework, capsys
):
    """The metric's name says what the bits are counted over: bpt for BPE tokens, bpc for characters,
    in the progress lines, metrics.csv, summary.json, and an evaluation in the other framework."""
    import math

    import zoo

    text = tmp_path / "text.txt"
    text.write_text(" ".join(t for t, _ in SENTENCES) * 20)
    other_framework = "keras" if framework == "lightning" else "lightning"
    for tokenizer, bits, not_bits in (("bpe", "bpt", "bpc"), ("char", "bpc", "bpt")):
        recipe = {
            "model": {"architecture": "transformer-tiny"},
            "data": {"name": "text", "path": str(text), "tokenizer": tokenizer, "bpe_vocab_size": 300,
                     "seq_len": 16, "batch_size": 16},
            "trainer": {"max_epochs": 1, "progress_bar": True},
            "export": {"dir": str(tmp_path / "runs"), "run_name": tokenizer},
            "tracking": {"tensorboard": False},
        }  # fmt: skip
        result = zoo.train(recipe, framework=framework)
        metrics = json.loads((result.run_dir / "summary.json").read_text())["metrics"]
        assert f"test_{not_bits}" not in metrics
        assert metrics[f"test_{bits}"] == pytest.approx(metrics["test_loss"] / math.log(2), rel=1e-5)
        header = (result.run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
        assert {f"train_{bits}", f"val_{bits}"} <= set(header) and f"train_{not_bits}" not in header
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epoch ")]
        assert f" - train_{bits} " in lines[-1], lines
        evaluated = zoo.evaluate(result.checkpoint, recipe, framework=other_framework)
        assert f"test_{bits}" in evaluated and f"test_{not_bits}" not in evaluated


def test_lm_text_is_packed_into_overlapping_blocks_per_tokenizer(tmp_path):
    folder = tmp_path / "texts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(" ".join(t for t, _ in SENTENCES) * 5)
    (folder / "sub" / "b.txt").write_text("\n".join(t for t, _ in SENTENCES) * 5)
    (folder / "ignored.md").write_text("not text")
    chars = load_dataset(TextData(path=folder, seq_len=16), "tokens")
    bpe = load_dataset(TextData(path=folder, seq_len=16, tokenizer="bpe", bpe_vocab_size=300), "tokens")
    assert isinstance(chars.tokenizer, CharTokenizer) and chars.vocab == chars.tokenizer.vocab
    assert "#" not in chars.vocab  # the .md file was not read
    assert bpe.vocab is None and bpe.info == {"task": "language_modeling", "vocab_size": 300}
    for data in (chars, bpe):
        split = data.train
        assert split.x.shape[1] == 16 and split.mask is None
        np.testing.assert_array_equal(split.x[:, 1:], split.y[:, :-1])  # targets: the next token
        np.testing.assert_array_equal(split.x[1:, 0], split.y[:-1, -1])  # blocks overlap by one token
    assert len(bpe.train) < len(chars.train)  # a BPE token covers several characters
    text = data.tokenizer.decode(np.concatenate([bpe.train.x[0], bpe.train.y[0, -1:]]))
    assert text in (folder / "a.txt").read_text() + "\n\n"


def test_masked_lm_blocks_are_masked_from_the_seeded_order(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(" ".join(t for t, _ in SENTENCES) * 40)
    data = load_dataset(
        TextData(path=path, seq_len=32, tokenizer="bpe", bpe_vocab_size=300, task="masked_language_modeling"),
        "tokens",
    )
    split, masking = data.train, data.train.masking
    index = np.arange(len(split))
    inputs, labels = masking.apply(split.x[index], index, seed=3, epoch=0)
    chosen = labels != IGNORE_INDEX
    assert 0.10 < chosen.mean() < 0.20  # 15%
    np.testing.assert_array_equal(labels[chosen], split.x[chosen])
    replaced = inputs[chosen] == masking.mask_id
    assert 0.7 < replaced.mean() < 0.9  # 80% [MASK]
    np.testing.assert_array_equal(inputs[~chosen], split.x[~chosen])
    again, _ = masking.apply(split.x[index[5:9]], index[5:9], seed=3, epoch=0)
    np.testing.assert_array_equal(again, inputs[5:9])  # a sample's mask does not depend on its batch
    other, _ = masking.apply(split.x[index], index, seed=3, epoch=1)
    assert (other != inputs).any()  # a new epoch masks anew
    fixed_a, _ = data.val.masking.apply(data.val.x, np.arange(len(data.val)), seed=0, epoch=0)
    fixed_b, _ = data.val.masking.apply(data.val.x, np.arange(len(data.val)), seed=0, epoch=7)
    np.testing.assert_array_equal(fixed_a, fixed_b)  # validation masks stay put
    with pytest.raises(DataError, match=r"needs a tokenizer with a \[MASK\] token"):
        load_dataset(TextData(path=path, seq_len=32, task="masked_language_modeling"), "tokens")


# ------------------------------------------------------------------------------ classification


def test_labelled_csv_is_padded_with_masks(tmp_path):
    data = load_dataset(labelled(tmp_path, val_fraction=0.25, test_fraction=0.25), "tokens")
    tokenizer = data.tokenizer
    assert data.classes == ("expression", "statement")
    assert data.info["num_classes"] == 2 and data.info["vocab_size"] == 300
    for split in (data.train, data.val, data.test):
        lengths = (~split.mask).sum(1)
        assert split.x.shape[1] == lengths.max()  # padded to the longest example of the split
        assert (split.x[split.mask] == tokenizer.pad_id).all()
        assert (split.x[:, 0] == tokenizer.cls_id).all()
        assert (split.x[np.arange(len(split)), lengths - 1] == tokenizer.sep_id).all()
        assert not split.mask[:, 0].any() and split.token_types is None
        for row in range(len(split)):
            assert not split.mask[row, : lengths[row]].any()  # padding only on the right
    assert data.notes == ()
    short = load_dataset(labelled(tmp_path, max_length=8), "tokens")
    assert short.train.x.shape[1] == 8
    assert short.notes and short.notes[0].startswith(f"{len(SENTENCES) * 4} of {len(SENTENCES) * 4} examples")


def test_sentence_pairs_get_token_types_and_jsonl_reads_like_csv(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [{"q": a, "a": b, "y": i % 2} for i, ((a, _), (b, _)) in enumerate(itertools.pairwise(SENTENCES))]
    path.write_text("\n".join(json.dumps(r) for r in rows * 4) + "\n\n")
    cfg = TextClassificationData(
        path=path, text_column="q", text_pair_column="a", label_column="y", bpe_vocab_size=300
    )
    data = load_dataset(cfg, "tokens")
    assert data.classes == () and data.info["num_classes"] == 2
    split, sep = data.train, data.tokenizer.sep_id
    for row in range(len(split)):
        ids, types, pad = split.x[row], split.token_types[row], split.mask[row]
        seps = np.flatnonzero(ids == sep)
        assert len(seps) == 2 and seps[1] == (~pad).sum() - 1
        assert (types[: seps[0] + 1] == 0).all() and (types[seps[0] + 1 : seps[1] + 1] == 1).all()
    truncated = load_dataset(cfg.model_copy(update={"max_length": 10}), "tokens").train
    kept = (~truncated.mask).sum(1)
    assert kept.max() == 10 and (truncated.token_types[:, :10].max(1) == 1).all()  # both segments kept


@pytest.mark.parametrize(
    ("content", "suffix", "fields", "message"),
    [
        ("words,label\nhello,1\n", ".csv", {}, r"the header row \['words', 'label'\] has no column 'text'"),
        ('text,label\n"a, b",1\nc,d,2\n', ".csv", {}, r"line 3: 3 cells under a header of 2"),
        ("text,label\nhello,\nworld,1\n", ".csv", {}, r"line 2: label '' is neither"),
        ("text,label\nhello,-1\nworld,1\n", ".csv", {}, r"line 2: label '-1' is negative"),
        ("text,label\n  ,1\nworld,1\n", ".csv", {}, r"line 2: 'text' is empty"),
        ("text,label\n", ".csv", {}, r"has no examples"),
        ('{"text": "a", "label": 1}\n{"text": "b", label: 2}\n', ".jsonl", {}, r"line 2 is not JSON"),
        ('{"text": "a", "label": 1}\n["b", 2]\n', ".jsonl", {}, r"line 2 is a JSON array, not an object"),
        ('{"text": "a", "label": 1}\n{"text": "b"}\n', ".jsonl", {}, r"line 2: no 'label' field"),
        (
            '{"text": "a", "label": 1}\n{"text": "b", "label": "x"}\n',
            ".jsonl",
            {},
            r"line 1: label 1 is a number",
        ),
        ('{"text": 3, "label": 1}\n', ".jsonl", {}, r"line 1: 'text' is 3, not text"),
    ],
)
def test_unusable_labelled_files_are_named_with_their_line(tmp_path, content, suffix, fields, message):
    path = tmp_path / f"data{suffix}"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_dataset(TextClassificationData(path=path, tokenizer="char", **fields), "tokens")


def test_recipe_refuses_what_cannot_be_read(tmp_path):
    bad = tmp_path / "data.tsv"
    bad.write_text("x")
    with pytest.raises(ValueError, match=r"zoo reads \.csv \(with a header row\) or \.jsonl"):
        TextClassificationData(path=bad)
    with pytest.raises(ValueError, match="name a column twice"):
        TextClassificationData(text_column="label")
    with pytest.raises(ValueError, match=r"data\.tokenizer 'nope\.json' is neither 'char', 'bpe' nor"):
        TextData(tokenizer="nope.json")
    with pytest.raises(ValueError, match=r"data\.lowercase applies to a WordPiece vocab\.txt only"):
        TextData(tokenizer="bpe", lowercase=True)
    with pytest.raises(DataError, match="reads images"):
        load_dataset(TextClassificationData(), "image")


def test_the_embedded_topics_are_a_labelled_set():
    data = load_dataset(TextClassificationData(max_length=64, bpe_vocab_size=512), "tokens")
    assert len(data.classes) == 5 and data.info["num_classes"] == 5
    counts = np.bincount(np.concatenate([data.train.y, data.val.y, data.test.y]), minlength=5)
    assert counts.min() >= 50, counts  # enough of every class to learn from
    assert set(np.unique(data.test.y)) == set(range(5))


# ------------------------------------------------------------------------------ both frameworks


def torch_batches(split, seed=0, shuffle=True, batch_size=5):
    from zoo.lightning.data import loader

    stream = loader(split, batch_size, seed, shuffle)
    stream.sampler.set_epoch(1)
    return [[None if t is None else t.numpy() for t in batch] for batch in stream]


def keras_batches(split, seed=0, shuffle=True, batch_size=5):
    from zoo.keras.data import train_dataset

    steps = -(-len(split) // batch_size)
    stream = train_dataset(split, batch_size, seed, shuffle, epochs=2, input_kind="tokens", start_epoch=1)
    return [(inputs, y.numpy()) for inputs, y in stream.take(steps)]


def test_both_frameworks_get_the_same_padded_and_masked_batches(tmp_path):
    padded = load_dataset(labelled(tmp_path), "tokens").train
    for (ids, mask, types, y), (inputs, y_keras) in zip(
        torch_batches(padded), keras_batches(padded), strict=True
    ):
        assert types is None and set(inputs) == {"ids", "padding_mask"}
        np.testing.assert_array_equal(inputs["ids"].numpy(), ids)
        np.testing.assert_array_equal(inputs["padding_mask"].numpy(), mask)
        np.testing.assert_array_equal(y_keras, y)
    text = tmp_path / "t.txt"
    text.write_text(" ".join(t for t, _ in SENTENCES) * 20)
    cfg = TextData(
        path=text, seq_len=16, tokenizer="bpe", bpe_vocab_size=300, task="masked_language_modeling"
    )
    masked = load_dataset(cfg, "tokens").train
    torch_side, keras_side = torch_batches(masked, seed=4), keras_batches(masked, seed=4)
    assert len(torch_side) == len(keras_side) > 1
    for (x, y), (x_keras, y_keras) in zip(torch_side, keras_side, strict=True):
        np.testing.assert_array_equal(x_keras.numpy(), x)
        np.testing.assert_array_equal(y_keras, y)
        assert (y != IGNORE_INDEX).any()


def twins(task: str, vocab_size: int, **fields):
    from zoo.initial_weights import seeded_keras_model, seeded_torch_model

    family = registry.get_family("bert")
    config = registry.resolve_config(
        "bert-micro", task=task, vocab_size=vocab_size, hidden_dropout=0.0, attention_dropout=0.0, **fields
    )
    return seeded_torch_model(family, config, 0).eval(), seeded_keras_model(family, config, 0)


def test_the_same_loss_on_a_padded_batch_in_both_frameworks(tmp_path):
    """Same weights, same padded batch: the same loss and accuracy to float32 precision, for a
    sequence classifier (padding masked) and a masked LM (ignored labels skipped)."""
    import torch

    from zoo.keras.losses import TextInputs
    from zoo.keras.steps import compile_for
    from zoo.lightning.task import TASKS

    def both(task, batch, inputs, y, vocab_size, **fields):
        torch_model, keras_model = twins(task, vocab_size, **fields)
        loss, metrics, _ = TASKS[task](torch_model, None, None).loss_and_metrics(batch)
        wrapped = TextInputs(keras_model)
        compile_for(wrapped, task, "sgd")
        keras_metrics = wrapped.evaluate(inputs, y, batch_size=len(y), verbose=0, return_dict=True)
        np.testing.assert_allclose(keras_metrics["loss"], loss.item(), rtol=2e-6)
        np.testing.assert_allclose(keras_metrics["accuracy"], metrics["accuracy"].item(), rtol=1e-6)
        return loss.item()

    split = load_dataset(labelled(tmp_path), "tokens").train
    x, mask, y = split.x[:8], split.mask[:8], split.y[:8]
    assert mask.any(axis=1).sum() >= 2  # rows of different lengths
    batch = (torch.from_numpy(x), torch.from_numpy(mask), None, torch.from_numpy(y))
    loss = both("classification", batch, {"ids": x, "padding_mask": mask}, y, 300, num_classes=2)
    # padding is masked: changing the ids under it changes nothing
    x_other = np.where(mask, 7, x)
    batch_other = (torch.from_numpy(x_other), torch.from_numpy(mask), None, torch.from_numpy(y))
    assert both(
        "classification", batch_other, {"ids": x_other, "padding_mask": mask}, y, 300, num_classes=2
    ) == (pytest.approx(loss, rel=1e-6))
    labels = np.where(np.random.default_rng(0).random(x.shape) < 0.3, x, IGNORE_INDEX)
    labels[mask] = IGNORE_INDEX
    batch = (torch.from_numpy(x), torch.from_numpy(mask), None, torch.from_numpy(labels))
    both("masked_language_modeling", batch, {"ids": x, "padding_mask": mask}, labels, 300)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_a_tiny_bert_trains_on_a_csv_and_evaluates_in_the_other_framework(tmp_path, framework):
    import zoo
    from zoo.checkpoint_tokenizer import tokenizer_of

    path = write_csv(tmp_path / "labelled.csv", SENTENCES * 6)
    recipe = {
        "model": {"architecture": "bert-micro"},
        "data": {"name": "text_classification", "path": str(path), "bpe_vocab_size": 300, "batch_size": 8},
        "optimizer": {"lr": 0.003},
        "trainer": {"max_epochs": 2, "progress_bar": False},
        "export": {"dir": str(tmp_path / "runs")},
    }
    result = zoo.train(recipe, framework=framework)
    assert [int(row["epoch"]) for row in result.history] == [1, 2]
    assert tokenizer_of(result.checkpoint).vocab_size == 300
    other = "keras" if framework == "lightning" else "lightning"
    metrics = zoo.evaluate(result.checkpoint, recipe, framework=other)
    assert metrics["test_loss"] == pytest.approx(result.metrics["test_loss"], rel=1e-5)
    assert metrics["test_accuracy"] == pytest.approx(result.metrics["test_accuracy"])


def test_padded_text_longer_than_the_positions_is_refused(tmp_path):
    import zoo

    recipe = {
        "model": {"architecture": "bert-micro"},
        "data": {"name": "text_classification", "path": str(write_csv(tmp_path / "a.csv", SENTENCES * 9))},
        "export": {"dir": str(tmp_path / "runs")},
    }
    with pytest.raises(DataError, match=r"reads at most 64; set data\.max_length to 64 or less"):
        long_text = [(" ".join([t] * 10), label) for t, label in SENTENCES]
        write_csv(tmp_path / "a.csv", long_text * 9)
        zoo.train(recipe, framework="lightning")


def test_char_tokenizer_of_classification_has_no_specials(tmp_path):
    data = load_dataset(labelled(tmp_path, tokenizer="char"), "tokens")
    assert isinstance(data.tokenizer, CharTokenizer)
    first = data.train.x[0][~data.train.mask[0]]
    assert data.tokenizer.decode(first) in [t for t, _ in SENTENCES]  # no [CLS]/[SEP] to add
    assert train_bpe  # the BPE kinds are tested in test_tokenizer.py


@pytest.mark.parametrize("content", ["", "\n \n"])
def test_train_on_a_file_without_text_names_it(tmp_path, content):
    text = tmp_path / "empty.txt"
    text.write_text(content)
    result = invoke(
        "train", LM_RECIPE, "--set", f"data.path={text}", "--set", f"export.dir={tmp_path / 'runs'}"
    )
    one_line_refusal(result, f"data.path '{text}': no text (empty, or only whitespace)")
    assert not (tmp_path / "runs").exists()


def test_text_too_short_for_a_test_split_is_named(tmp_path):
    text = tmp_path / "short.txt"
    text.write_text("abcdefgh " * 10)
    cfg = TextData(path=text, seq_len=8, val_fraction=0, test_fraction=0.01)
    with pytest.raises(
        DataError, match=r"short.txt': 90 tokens leave none for testing at data.test_fraction 0.01"
    ):
        load_dataset(cfg, "tokens")
