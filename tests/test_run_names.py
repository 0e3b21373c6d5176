"""Default run folder names say the model and, for fine-tuning, what the run started from, so
`zoo runs` and `zoo plot` tell runs of one recipe apart; a name that cannot name a folder is
refused, by `zoo validate` and `zoo train` in the same words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import sets
from cli_helpers import zoo as command
from conftest import RECIPE, tiny

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


def recipe_file(folder, name: str, text: str) -> str:
    path = folder / name
    path.write_text(f"{text}\nmodel: {{architecture: convnet-tiny}}\ntrainer: {{max_epochs: 1}}\n")
    return str(path)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        # A YAML escape makes a lone surrogate: it used to end in a UnicodeEncodeError traceback.
        (
            'name: "\\udce9"',
            "name: '\\udce9' is not Unicode text: character 1 ('\\udce9') is a lone surrogate",
        ),
        ('name: "ok"\ndescription: "x\\ud800"', "description: 'x\\ud800' is not Unicode text: character 2"),
        # Refused for export.run_name, which the recipe never set.
        (
            "name: ../../escape",
            "name: '../../escape' names the run folders (<name>-<model>-<framework>-<time>)",
        ),
        ("name: '..'", "name: '..' names the run folders"),
        (f"name: {'n' * 200}", "name: is 200 bytes long; it starts the run folders' names"),
    ],
    ids=["surrogate", "surrogate-elsewhere", "escape", "dot-dot", "long"],
)
def test_a_recipe_name_that_cannot_name_run_folders_is_refused_naming_name(tmp_path, written, expected):
    recipe = recipe_file(tmp_path, "r.yaml", written)
    for verb in ("validate", "train"):
        code, out = command(verb, recipe, "--set", f"export.dir={tmp_path / 'runs'}")
        assert code == 2 and expected in out, out
        assert "export.run_name" not in out and "Traceback" not in out
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "escape").exists()


def test_a_recipe_file_name_that_is_not_utf8_still_names_its_runs(tmp_path):
    import os

    path = os.path.join(os.fsencode(tmp_path), b"caf\xe9.yaml")
    with open(path, "w") as handle:
        handle.write("model: {architecture: convnet-tiny}\n")
    assert zoo.load_recipe(os.fsdecode(path)).name == "caf\ufffd"


@pytest.mark.parametrize("name", ["../../escape", "/tmp/abs-escape", "..", "x" * 300])
def test_validate_and_train_agree_on_run_names(tmp_path, name):
    code, out = command("validate", str(RECIPE), *sets(f"export.run_name={name}"))
    assert code == 2 and "export.run_name" in out and ("not a folder name" in out or "bytes long" in out), out
    line = next(part for part in out.splitlines() if "export.run_name" in part)
    code, out = command("train", str(RECIPE), *sets(*tiny(tmp_path, f"export.run_name={name}")))
    assert code == 2 and line.split(": ", 1)[-1] in out, out
    assert list(tmp_path.iterdir()) == [] and not Path("/tmp/abs-escape").exists()
