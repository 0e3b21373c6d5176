"""``zoo.load``: a checkpoint, a run folder, a timm / transformers folder (imported on the fly),
a preset name or another library's name of one; label names and mean/std through the foreign
exports and back; ``zoo.load_checkpoint`` on a folder says what to call instead."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from conftest import RECIPE, eval_output, forward_keras, forward_torch, tiny

import zoo
from zoo import registry
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint_tokenizer import tokenizer_of
from zoo.loading import cache_root, locate
from zoo.preprocessing import ImagePreprocessing, Preprocessing, TextPreprocessing
from zoo.tokenizer import CharTokenizer

LABELS = ("cat", "dog", "fox")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """On-the-fly imports go to a temporary cache."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return zoo.train(RECIPE, "lightning", tiny(tmp_path_factory.mktemp("run")))


def _saved(tmp_path, name: str, preprocessing: Preprocessing, **fields):
    model = zoo.create_model(name, "lightning", seed=0, **fields)
    return model, zoo.save_checkpoint(
        model, tmp_path / name / "model.safetensors", preprocessing=preprocessing
    )


def test_a_checkpoint_and_its_run_folder_load_in_both_frameworks(run):
    x = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32)
    family = read_checkpoint(run.checkpoint).family
    expected = forward_torch(zoo.load_checkpoint(run.checkpoint), x, training=False)
    for source in (run.checkpoint, run.run_dir, str(run.run_dir)):
        np.testing.assert_array_equal(forward_torch(zoo.load(source), x, training=False), expected)
        keras = forward_keras(zoo.load(source, framework="keras"), x, family, training=False)
        np.testing.assert_allclose(keras, expected, atol=1e-5)
    with pytest.raises(CheckpointError, match="seed and config fields are for a family or preset name"):
        zoo.load(run.checkpoint, seed=0)


def test_load_checkpoint_on_a_folder_says_what_to_call(run, tmp_path):
    target = run.run_dir / "model.safetensors"
    with pytest.raises(
        CheckpointError,
        match=re.escape(f"a zoo run folder; its checkpoint is {target}: zoo.load_checkpoint("),
    ):
        zoo.load_checkpoint(run.run_dir)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CheckpointError, match=r"a folder that holds no checkpoint .* it has: notes\.txt"):
        zoo.load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="a folder that holds no checkpoint"):
        zoo.load(tmp_path)


def test_preset_names_and_other_libraries_names_build_fresh_models():
    assert locate("vit_tiny_patch16_224").name == "vit-tiny"
    assert locate("resnet50.tv_in1k").name == "resnet50"  # timm's tag is left out
    assert locate("tv_resnet50").name == "resnet50"
    assert locate("convnext_tiny.fb_in1k").name == "convnext-tiny"
    assert locate("openai-community/gpt2").name == "gpt2"
    assert locate("HuggingFaceTB/SmolLM-135M").name == "smollm-135m"
    assert locate("convnet-tiny").name == "convnet-tiny"
    model = zoo.load("google/bert_uncased_L-2_H-128_A-2", seed=3)
    expected = zoo.create_model("bert-tiny", seed=3)
    ids = np.array([[101, 2023, 102]])
    np.testing.assert_array_equal(eval_output(model, ids), eval_output(expected, ids))
    keras = zoo.load("convnet-tiny", framework="keras", num_classes=3)
    assert keras.zoo_config.num_classes == 3
    with pytest.raises(registry.UnknownArchitectureError, match="did you mean 'vit_tiny_patch16_224'"):
        zoo.load("vit_tiny_patch16_244")
    with pytest.raises(CheckpointError, match="no such file or folder"):
        zoo.load("./nothing-here.safetensors")
    with pytest.raises(registry.UnknownArchitectureError, match="another library's name of zoo's 'vit-tiny'"):
        registry.get_family("vit_tiny_patch16_224")


def test_a_timm_export_carries_mean_std_and_labels_and_loads_back(tmp_path):
    image = ImagePreprocessing(size=32, resize=36, interpolation="bicubic", mean=(0.5,) * 3, std=(0.2,) * 3)
    recorded = Preprocessing(source="test", image=image, labels=LABELS)
    model, path = _saved(tmp_path, "resnet18", recorded, num_classes=3, image_size=32)
    zoo.export_checkpoint(path, "timm", tmp_path / "timm")
    config = json.loads((tmp_path / "timm" / "config.json").read_text())
    assert config["label_names"] == list(LABELS)
    pretrained = config["pretrained_cfg"]
    assert (pretrained["mean"], pretrained["std"], pretrained["interpolation"]) == (
        [0.5] * 3,
        [0.2] * 3,
        "bicubic",
    )
    assert pretrained["input_size"] == [3, 32, 32] and int(32 / pretrained["crop_pct"]) == 36
    loaded = zoo.load(tmp_path / "timm")  # imported on the fly, into the cache
    found = locate(tmp_path / "timm")
    assert found.imported_from == tmp_path / "timm" and found.checkpoint.is_relative_to(cache_root())
    assert read_checkpoint(found.checkpoint).preprocessing.image == image
    assert read_checkpoint(found.checkpoint).preprocessing.labels == LABELS
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    np.testing.assert_allclose(
        forward_torch(loaded, x, training=False), forward_torch(model, x, training=False), atol=1e-5
    )
    with pytest.raises(CheckpointError, match=r"a timm folder, not a zoo checkpoint: zoo\.load"):
        zoo.load_checkpoint(tmp_path / "timm")


def test_a_torchvision_state_dict_loads_with_torchvisions_eval_transform(tmp_path):
    model = zoo.create_model("resnet18", "lightning", seed=0, num_classes=4)
    torch.save(model.state_dict(), tmp_path / "resnet18.pth")
    found = locate(tmp_path / "resnet18.pth")
    image = read_checkpoint(found.checkpoint).preprocessing.image
    assert (image.size, image.resize, image.interpolation) == (224, 256, "bilinear")
    assert image.mean == (0.485, 0.456, 0.406) and image.std == (0.229, 0.224, 0.225)
    assert locate(tmp_path / "resnet18.pth").checkpoint == found.checkpoint  # the cache is reused


def test_an_hf_export_writes_id2label_and_a_transformers_folder_loads_back(tmp_path):
    recorded = Preprocessing(source="test", labels=LABELS)
    model, path = _saved(
        tmp_path, "bert-micro", recorded, task="classification", num_classes=3, vocab_size=40
    )
    zoo.export_checkpoint(path, "hf", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "cat", "1": "dog", "2": "fox"}
    assert config["label2id"] == {"cat": 0, "dog": 1, "fox": 2}
    loaded = zoo.load(str(tmp_path / "hf"), framework="keras")
    assert read_checkpoint(locate(tmp_path / "hf").checkpoint).preprocessing.labels == LABELS
    ids = np.array([[1, 5, 7, 2]])
    np.testing.assert_allclose(eval_output(loaded, ids), eval_output(model, ids), atol=1e-5)


def test_labels_that_do_not_fit_the_model_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="names 2 labels but the model has 3 classes"):
        _saved(tmp_path, "convnet-tiny", Preprocessing(source="test", labels=("a", "b")), num_classes=3)


def test_a_family_whose_aliases_do_not_fit_is_reported():
    from dataclasses import replace

    vit = registry.get_family("vit")
    bad = replace(vit, aliases={"vit-tiny": "vit-tiny", "vit_huge_patch14_224": "vit-huge"})
    problems = registry.check_family(bad)
    assert any("'vit-tiny' is not another name" in p for p in problems)
    assert any(
        "'vit_huge_patch14_224' -> 'vit-huge', which is neither the family nor one of its" in p
        for p in problems
    )


@pytest.mark.parametrize("name", ["gpt2-micro", "llama-micro"])
def test_a_transformers_language_model_brings_its_tokenizer_into_the_record_and_back(tmp_path, name):
    """gpt2's and llama's hf folders alike: the tokenizer beside the weights is recorded (with its
    fingerprint), reads the same ids once imported, and an hf export writes it back."""
    model = zoo.create_model(name, "lightning", seed=0, vocab_size=40)
    zoo.export_checkpoint(zoo.save_checkpoint(model, tmp_path / "zoo.safetensors"), "hf", tmp_path / "hf")
    tokenizer = CharTokenizer("abcdefghijklmnopqrstuvwxyz .")
    tokenizer.save(tmp_path / "hf")
    found = locate(tmp_path / "hf")
    recorded = read_checkpoint(found.checkpoint).preprocessing
    assert recorded.text == TextPreprocessing(tokenizer="tokenizer.json", fingerprint=tokenizer.fingerprint())
    assert tokenizer_of(found.checkpoint).encode("a cab.") == tokenizer.encode("a cab.")
    written = zoo.export_checkpoint(found.checkpoint, "hf", tmp_path / "back")
    assert written.with_name("tokenizer.json").read_text() == (tmp_path / "hf" / "tokenizer.json").read_text()


def test_a_name_says_its_weights_are_random_and_nothing_is_downloaded():
    """A transformers or timm user reads ``gpt2`` and ``bert-base-uncased`` as pretrained
    weights: without a seed, zoo.load and create_model warn in one line; a seed asks for the
    initialisation explicitly, and is not warned about."""
    import warnings

    from zoo.loading import RandomWeightsWarning

    for call in (
        lambda: zoo.load("gpt2", n_layer=1),
        lambda: zoo.load("bert-base-uncased", num_layers=1),
        lambda: zoo.load("vit_tiny_patch16_224", depth=1),
        lambda: zoo.create_model("gpt2", n_layer=1),
    ):
        with pytest.warns(RandomWeightsWarning) as caught:
            call()
        message = str(caught[0].message)
        assert "random weights" in message and "nothing is downloaded" in message and "\n" not in message
        assert caught[0].filename == __file__  # where the user called it
    with warnings.catch_warnings():
        warnings.simplefilter("error", RandomWeightsWarning)
        zoo.load("gpt2", seed=0, n_layer=1)
        zoo.create_model("gpt2", seed=0, n_layer=1)
