"""``zoo predict`` / ``zoo.predict``: a trained checkpoint on the user's own files in either
framework, and the preprocessing a zoo run records for it (zoo.preprocessing)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FRAMEWORKS, RECIPE, char_checkpoint, tiny
from PIL import Image

import zoo
from zoo.checkpoint.metadata import read_checkpoint
from zoo.cli import main
from zoo.data import load_dataset
from zoo.data.preprocessing import DIGITS, fine_tune_data
from zoo.predict_inputs import PredictError
from zoo.preprocessing import ImagePreprocessing, Preprocessing, parse_preprocessing
from zoo.recipe.image_data import ImageFolderData
from zoo.recipe.schema import Recipe


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """A convnet trained on the shipped digits, and its test split as arrays and as 8x8 PNGs."""
    root = tmp_path_factory.mktemp("predict")
    result = zoo.train(RECIPE, "lightning", tiny(root, "trainer.max_epochs=4"))
    checkpoint = read_checkpoint(result.checkpoint)
    data = Recipe.model_validate(checkpoint.json("recipe")).data
    test = load_dataset(data, "image").test
    images = root / "test-images"
    images.mkdir()
    for i, (x, y) in enumerate(zip(test.x, test.y, strict=True)):
        pixels = np.round(x[0] * 255).astype(np.uint8)  # x is 0..16 / 16: PNG keeps it to 1/510
        Image.fromarray(pixels, "L").save(images / f"{i:04d}-{y}.png")
    np.save(root / "test.npy", test.x)
    return result, test, images, root / "test.npy"


def test_a_zoo_run_records_its_preprocessing_and_label_names(digits):
    result, *_ = digits
    recorded = read_checkpoint(result.checkpoint).preprocessing
    assert recorded.image == DIGITS
    assert recorded.labels == tuple(str(d) for d in range(10))
    assert recorded.source == "the recipe's data section"


def test_the_same_top1_in_both_frameworks_on_the_digits_test_split(digits):
    result, test, images, array = digits
    metrics = read_checkpoint(result.checkpoint).json("metrics")
    on_arrays, on_images = {}, {}
    for framework in FRAMEWORKS:
        on_arrays[framework] = [
            p.labels[0]["id"] for p in zoo.predict(result.checkpoint, array, framework=framework)
        ]
        found = zoo.predict(result.checkpoint, images, framework=framework, top_k=3)
        assert [p.input for p in found] == sorted(str(p) for p in images.iterdir())
        assert all(len(p.labels) == 3 and p.labels[0]["score"] >= p.labels[1]["score"] for p in found)
        on_images[framework] = [p.labels[0]["id"] for p in found]
    assert on_arrays["lightning"] == on_arrays["keras"]
    assert on_images["lightning"] == on_images["keras"]
    # The arrays are exactly what the test metric was computed on: the same accuracy.
    accuracy = np.mean(np.array(on_arrays["lightning"]) == test.y)
    assert accuracy == pytest.approx(metrics["test_accuracy"], abs=1e-6)
    # The PNGs hold the pixels to 1/510: nearly every answer is the same.
    agree = np.mean(np.array(on_images["lightning"]) == np.array(on_arrays["lightning"]))
    assert agree >= 0.98, f"images and arrays agree on only {agree:.1%} of the test split"


def test_cli_prints_label_names_json_and_quiet_lines(digits):
    result, _, images, _ = digits
    files = sorted(images.iterdir())[:3]
    runner = CliRunner()
    shown = runner.invoke(main, ["predict", str(result.checkpoint), str(files[0]), "--top-k", "2"])
    assert shown.exit_code == 0, shown.output
    name, answer = shown.output.strip().rsplit(": ", 1)
    assert name == str(files[0]) and len(answer.split(", ")) == 2
    glob = str(images / "000[0-2]-*.png")
    as_json = runner.invoke(
        main, ["predict", str(result.checkpoint.parent), glob, "--json", "--framework", "keras"]
    )
    assert as_json.exit_code == 0, as_json.output
    out = json.loads(as_json.output)
    assert out["task"] == "classification" and out["framework"] == "keras"
    assert [p["input"] for p in out["predictions"]] == [str(f) for f in files]
    assert all(p["labels"][0]["label"] in "0123456789" for p in out["predictions"])
    quiet = runner.invoke(main, ["predict", str(result.checkpoint), glob, "--quiet"])
    assert [line.split("\t")[0] for line in quiet.output.splitlines()] == [str(f) for f in files]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("missing.png", "missing.png: no such file or folder"),
        ("nothing-*.png", r"nothing-\*.png: matches no file"),
        ("notes.txt", "notes.txt: a text file, but the model reads images"),
        ("wrong.npy", r"wrong.npy: an array of shape \[2, 3\]; the model reads \(N, 1, 8, 8\)"),
    ],
)
def test_inputs_the_model_cannot_read_are_refused_naming_them(digits, tmp_path, monkeypatch, inputs, message):
    result, *_ = digits
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("a digit\n")
    np.save(tmp_path / "wrong.npy", np.zeros((2, 3), np.float32))
    with pytest.raises(PredictError, match=message):
        zoo.predict(result.checkpoint, inputs)
    shown = CliRunner().invoke(main, ["predict", str(result.checkpoint), inputs])
    assert shown.exit_code == 2 and "Traceback" not in shown.output


def test_texts_for_an_image_model_and_a_bare_preset_name_are_refused(digits):
    result, *_ = digits
    with pytest.raises(PredictError, match="texts were given, but the model reads images"):
        zoo.predict(result.checkpoint, texts=["seven"])
    shown = CliRunner().invoke(main, ["predict", "convnet-tiny", "x.png"])
    assert shown.exit_code == 2 and "has no trained weights" in shown.output


def test_a_recorded_image_transform_fills_what_a_fine_tune_recipe_leaves_open(tmp_path, caplog):
    recorded = Preprocessing(
        source="test",
        image=ImagePreprocessing(
            size=16, resize=18, interpolation="bicubic", mean=(0.5,) * 3, std=(0.25,) * 3
        ),
    )
    open_recipe = ImageFolderData(name="image_folder", root=str(tmp_path))
    with caplog.at_level(logging.INFO, logger="zoo"):
        taken = fine_tune_data(open_recipe, recorded, "ckpt")
    assert (taken.image_size, taken.resize, taken.interpolation) == (16, 18, "bicubic")
    assert taken.mean == (0.5,) * 3 and taken.std == (0.25,) * 3
    assert "preprocessing of ckpt: data.image_size 16, data.resize 18" in caplog.text
    assert "WARNING" not in caplog.text
    caplog.clear()
    own = ImageFolderData(name="image_folder", root=str(tmp_path), image_size=24)
    with caplog.at_level(logging.INFO, logger="zoo"):
        kept = fine_tune_data(own, recorded, "ckpt")
    assert kept.image_size == 24 and kept.resize is None  # the recipe's size group stays the recipe's
    assert kept.mean == (0.5,) * 3  # the groups the recipe leaves open still come from the checkpoint
    assert "the recipe sets data.image_size 24, data.resize 24, not the preprocessing of ckpt" in caplog.text


def test_fine_tuning_on_an_image_folder_records_the_checkpoints_transform(tmp_path, caplog):
    from zoo.data.digits import write_digits_folder

    folder = write_digits_folder(tmp_path / "digits", size=12, per_class=12)
    first = zoo.train(
        RECIPE, "lightning",
        tiny(tmp_path / "a", "data={name: image_folder, root: " + str(folder) + ", image_size: 12, "
             "resize: 14, mean: [0.4, 0.4, 0.4], std: [0.2, 0.2, 0.2], workers: 0, batch_size: 32}"),
    )  # fmt: skip
    recorded = read_checkpoint(first.checkpoint).preprocessing
    assert (recorded.image.size, recorded.image.resize, recorded.image.mean) == (12, 14, (0.4, 0.4, 0.4))
    assert recorded.labels == tuple(str(d) for d in range(10))
    with caplog.at_level(logging.INFO, logger="zoo"):
        second = zoo.train(
            RECIPE, "keras",
            tiny(tmp_path / "b", f"init.from={first.checkpoint}", "trainer.max_epochs=1",
                 "data={name: image_folder, root: " + str(folder) + ", workers: 0, batch_size: 32}"),
        )  # fmt: skip
    assert f"preprocessing of {first.checkpoint}: data.image_size 12, data.resize 14" in caplog.text
    assert read_checkpoint(second.checkpoint).preprocessing.image == recorded.image


def test_a_newer_or_damaged_record_is_refused_by_name():
    with pytest.raises(ValueError, match="is version 9, newer than this zoo reads"):
        parse_preprocessing('{"version": 9, "source": "x"}', "the record")
    with pytest.raises(
        ValueError, match="does not validate: image: resize 4 is smaller than the crop size 8"
    ):
        parse_preprocessing(
            '{"source": "x", "image": {"size": 8, "resize": 4, "mean": [0], "std": [1], '
            '"channels": "grayscale"}}',
            "the record",
        )


VOCAB = "\n abcdefghij"


def _text_model(tmp_path, name: str, labels=None, **fields):
    recorded = Preprocessing(source="test", labels=labels) if labels else None
    return char_checkpoint(tmp_path, name, VOCAB, recorded, **fields)


def test_a_language_model_continues_a_batch_as_zoo_sample_continues_each_text(tmp_path):
    from zoo.sample import sample

    checkpoint = _text_model(tmp_path, "gpt2-micro", n_positions=16)
    (tmp_path / "prompts.txt").write_text("abc\n\nj ih\nfaded bag\n")
    prompts = ["abc", "j ih", "faded bag"]
    for framework in FRAMEWORKS:
        found = zoo.predict(checkpoint, tmp_path / "prompts.txt", framework=framework, length=12)
        assert [p.input for p in found] == [f"{tmp_path / 'prompts.txt'}:{n}" for n in (1, 3, 4)]
        alone = [sample(checkpoint, prompt, 12, framework=framework) for prompt in prompts]
        assert [p.text for p in found] == alone  # left padding changes nothing the model sees


def test_a_text_classifier_reads_lines_jsonl_and_texts_alike_in_both_frameworks(tmp_path):
    labels = ("ham", "spam", "eggs")
    checkpoint = _text_model(tmp_path, "bert-micro", labels, task="classification", num_classes=3)
    texts = ["a bad cafe", "hi", "jigged ice face"]
    (tmp_path / "lines.txt").write_text("\n".join(texts) + "\n")
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts))
    )
    scores = {}
    for framework in FRAMEWORKS:
        for inputs, given in (("lines.txt", ()), ("rows.jsonl", ()), ((), texts)):
            found = zoo.predict(checkpoint, [tmp_path / i for i in ([inputs] if inputs else [])], texts=given,
                                framework=framework, top_k=3, batch_size=2)  # fmt: skip
            assert all(sorted(x["label"] for x in p.labels) == sorted(labels) for p in found)
            by_id = [sorted(p.labels, key=lambda x: x["id"]) for p in found]
            scores[framework, inputs] = np.array([[x["score"] for x in row] for row in by_id])
    expected = scores["lightning", "lines.txt"]
    assert not np.allclose(expected, 1 / 3, atol=1e-3), "random weights that say nothing test nothing"
    for value in scores.values():
        np.testing.assert_allclose(value, expected, atol=1e-5)
    (tmp_path / "bad.jsonl").write_text('{"body": "abc"}\n')
    with pytest.raises(PredictError, match=r"bad.jsonl, line 1: no text at 'text' .* it has 'body'"):
        zoo.predict(checkpoint, tmp_path / "bad.jsonl")
