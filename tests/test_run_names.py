"""Default run folder names say the model and, for fine-tuning, what the run started from, so
`zoo runs` and `zoo plot` tell runs of one recipe apart."""

from __future__ import annotations

import re

import pytest
from conftest import RECIPE

import zoo
from zoo.recipe.schema import run_name_problem
from zoo.runs import RunDir

TIME = r"\d{8}-\d{6}"


@pytest.mark.parametrize(
    ("recipe", "model", "source", "expected"),
    [
        ("cnn-digits", "convnet-tiny", None, "cnn-digits-convnet-tiny-keras"),
        ("gpt2-micro-pydocs", "gpt2-micro", None, "gpt2-micro-pydocs-keras"),  # the name says it
        ("my-run", "", None, "my-run-keras"),
        # A run's checkpoint is named by its run, without that run's framework, time and suffix.
        ("cnn-digits-5to9-few", "convnet-small",
         "checkpoints/cnn-digits-0to4-lightning-20261127-071500-2/model.safetensors",
         "cnn-digits-5to9-few-convnet-small-from-cnn-digits-0to4-keras"),
        # An imported model's folder, and a checkpoint file of another name.
        ("gpt2-micro-pydocs", "gpt2", "ckpt-gpt2/model.safetensors",
         "gpt2-micro-pydocs-from-ckpt-gpt2-keras"),
        ("lstm-charlm", "lstm-small", "best.safetensors", "lstm-charlm-lstm-small-from-best-keras"),
    ],
)  # fmt: skip
def test_default_names(recipe, model, source, expected):
    name = RunDir.default_name(recipe, "keras", model, source)
    assert re.fullmatch(rf"{re.escape(expected)}-{TIME}", name), name


def test_a_long_source_name_is_cut_and_the_name_still_names_a_folder():
    name = RunDir.default_name("r" * 150, "lightning", "m", "x" * 300 + ".safetensors")
    assert f"-from-{'x' * 48}-lightning-" in name and run_name_problem(name) is None


def test_a_fine_tuning_run_is_named_after_its_model_and_source(tmp_path):
    settings = ["model.architecture=convnet-tiny", "trainer.max_epochs=1", "trainer.progress_bar=false"]
    settings += ["data.batch_size=64", f"export.dir={tmp_path}"]
    first = zoo.train(RECIPE, "lightning", [*settings, "data.classes=[0,1,2,3,4]"])
    assert re.fullmatch(rf"cnn-digits-convnet-tiny-lightning-{TIME}", first.run_dir.name)
    tuned = zoo.train(
        RECIPE, "lightning", [*settings, "data.classes=[5,6,7]", f"init.from={first.checkpoint}"]
    )
    expected = rf"cnn-digits-convnet-tiny-from-cnn-digits-convnet-tiny-lightning-{TIME}"
    assert re.fullmatch(expected, tuned.run_dir.name), tuned.run_dir.name
    assert tuned.run_dir.parent == first.run_dir.parent == tmp_path
