"""Recipe inheritance: ``base: other.yaml`` (relative to the recipe's file), deep-merged (mappings
merge, lists and scalars replace, a section of another kind replaces), chains allowed, validated
once; cycles and missing bases refused in one line naming the files; what a run keeps is the
resolved recipe, which names no base."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_helpers import zoo_cli

import zoo
from zoo.api import resume
from zoo.recipe import RecipeError, load_recipe
from zoo.recipe.bases import deep_merge
from zoo.recipe.loader import load_recipe_chain

BASE = {
    "model": {"architecture": "convnet-tiny", "dropout": 0.3},
    "data": {"name": "digits", "batch_size": 32},
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "trainer": {"max_epochs": 3, "seed": 7},
    "tracking": {"mlflow": {"enabled": False, "experiment": "base-exp"}},
}


def write(path: Path, recipe: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_deep_merge_merges_mappings_and_replaces_the_rest():
    base = {"a": {"b": 1, "c": [1, 2], "d": {"e": 1}}, "x": 1}
    over = {"a": {"c": [3], "d": {"f": 2}}, "y": 2}
    assert deep_merge(base, over) == {"a": {"b": 1, "c": [3], "d": {"e": 1, "f": 2}}, "x": 1, "y": 2}
    assert base == {"a": {"b": 1, "c": [1, 2], "d": {"e": 1}}, "x": 1}  # inputs untouched
    # a section of another kind starts afresh: sgd's momentum would be an unknown key for adam
    assert deep_merge({"name": "sgd", "momentum": 0.9}, {"name": "adam"}) == {"name": "adam"}


def test_a_chain_resolves_relative_to_each_file(tmp_path):
    write(tmp_path / "shared" / "root.yaml", {**BASE, "name": "root"})
    write(tmp_path / "shared" / "mid.yaml", {"base": "root.yaml", "trainer": {"max_epochs": 5}})
    child = write(
        tmp_path / "mine" / "child.yaml",
        {"base": "../shared/mid.yaml", "model": {"dropout": 0.1}, "optimizer": {"lr": 0.01},
         "tracking": {"mlflow": {"enabled": True}}},
    )  # fmt: skip
    recipe, bases = load_recipe_chain(child, ["data.batch_size=16"])
    assert bases == [str((tmp_path / "shared" / n).resolve()) for n in ("root.yaml", "mid.yaml")]
    assert recipe.name == "child"  # a base's name is not inherited: it names the runs
    assert (recipe.model.preset, recipe.model.dropout) == ("convnet-tiny", 0.1)
    assert (recipe.optimizer.name, recipe.optimizer.lr, recipe.optimizer.momentum) == ("sgd", 0.01, 0.9)
    assert (recipe.trainer.max_epochs, recipe.trainer.seed, recipe.data.batch_size) == (5, 7, 16)
    assert recipe.tracking.mlflow.enabled and recipe.tracking.mlflow.experiment == "base-exp"
    # What a run keeps is the resolved recipe: it loads alone, the bases gone, to the same recipe.
    kept = write(tmp_path / "run" / "recipe.yaml", recipe.to_dict())
    (tmp_path / "shared" / "root.yaml").unlink()
    assert "base" not in yaml.safe_load(kept.read_text()) and load_recipe(kept) == recipe


def test_the_merged_recipe_is_validated_once(tmp_path):
    """A base may be incomplete (no model) and a child may lean on it; an error in the merge is
    reported against the recipe given, with its field path."""
    write(tmp_path / "partial.yaml", {"trainer": {"max_epochs": 2}})
    model = {"architecture": "convnet-tiny"}
    child = write(tmp_path / "child.yaml", {"base": "partial.yaml", "model": model})
    assert load_recipe(child).trainer.max_epochs == 2
    write(tmp_path / "bad.yaml", {"base": "partial.yaml", "model": {"architecture": "convnet-tiny"},
                                  "trainer": {"max_epocs": 3}})  # fmt: skip
    with pytest.raises(RecipeError) as error:
        load_recipe(tmp_path / "bad.yaml")
    assert "trainer.max_epocs" in str(error.value)


@pytest.mark.parametrize(
    "files, words",
    [
        ({"a.yaml": {"base": "a.yaml"}}, ["cycle", "a.yaml -> ", "a.yaml"]),
        ({"a.yaml": {"base": "b.yaml"}, "b.yaml": {"base": "a.yaml"}}, ["cycle", "a.yaml", "b.yaml"]),
        ({"a.yaml": {"base": "gone.yaml"}}, ["'gone.yaml'", "a.yaml", "no such file"]),
        ({"a.yaml": {"base": 3}}, ["needs a recipe file name", "a.yaml"]),
        ({"a.yaml": {"base": "b.yaml"}, "b.yaml": "- a list"}, ["b.yaml", "named in", "a.yaml", "mapping"]),
    ],
)
def test_cycles_and_missing_bases_are_refused_in_one_line(tmp_path, files, words):
    for name, content in files.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    with pytest.raises(RecipeError) as error:
        load_recipe(tmp_path / "a.yaml")
    assert len(error.value.problems) == 1 and "\n" not in error.value.problems[0]
    for word in words:
        assert word in error.value.problems[0], error.value.problems[0]
    status, out = zoo_cli("validate", tmp_path / "a.yaml")
    assert status == 2 and words[0] in out


def test_validate_show_names_the_chain(tmp_path):
    write(tmp_path / "root.yaml", BASE)
    child = write(tmp_path / "child.yaml", {"base": "root.yaml", "trainer": {"seed": 1}})
    status, out = zoo_cli("validate", child, "--show", "--quiet")
    assert status == 0
    head = out.splitlines()[:2]
    assert head == [f"# base: {(tmp_path / 'root.yaml').resolve()}", f"# recipe: {child}"]
    shown = yaml.safe_load(out)
    assert shown["trainer"]["seed"] == 1 and shown["optimizer"]["momentum"] == 0.9 and "base" not in shown
    status, out = zoo_cli("validate", child, "--show", "--json")
    assert status == 0 and '"bases"' in out


@pytest.mark.slow
def test_a_run_keeps_the_resolved_recipe(tmp_path):
    """zoo train of a recipe built on a base: the run's recipe.yaml is the resolved recipe, so the
    run reads back (zoo resume, zoo evaluate) after the base is gone."""
    root = write(tmp_path / "root.yaml", {**BASE, "trainer": {"max_steps": 3, "progress_bar": False}})
    child = write(tmp_path / "child.yaml", {"base": "root.yaml", "export": {"dir": str(tmp_path / "runs")}})
    result = zoo.train(child, "lightning")
    kept = yaml.safe_load((result.run_dir / "recipe.yaml").read_text())
    assert "base" not in kept and kept["optimizer"]["momentum"] == 0.9 and kept["name"] == "child"
    root.unlink()
    assert resume(result.run_dir).already_finished
    assert zoo.evaluate(result.run_dir)["test_loss"] == pytest.approx(result.metrics["test_loss"], rel=1e-6)
