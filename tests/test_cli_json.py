"""``--json`` and ``--quiet`` on every zoo command, for scripts: with ``--json`` stdout parses as
one JSON document and holds nothing else; with ``--quiet`` it holds only the essential line; an
error leaves stdout empty and says why on stderr with exit status 2 (bad input) or 1 (failed run).

Models here are the registry's smallest with random weights; the one training run is one epoch
of the tiniest recipe. ``zoo runs``/``runs show``/``plot`` are in test_runs_cli.py.
"""

from __future__ import annotations

import importlib
import io
import json
import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import RECIPE, tiny

import zoo
from zoo import registry
from zoo.cli import main
from zoo.recipe import load_recipe

VOCAB = "\n abcdefghij"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def document(*args) -> dict:
    """The command's ``--json`` document; stdout must be that document and nothing else."""
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def quiet(*args) -> list[str]:
    """The lines ``--quiet`` prints on stdout."""
    result = invoke(*args, "--quiet")
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def smallest(fits) -> str:
    entries = sorted((e for e in registry.list_architectures() if fits(e)), key=lambda e: e.parameters)
    return entries[0].name


def commands(group: click.Group, prefix: str = "zoo") -> dict[str, click.Command]:
    """Every command a user can run, subcommands included (a group that runs is one too)."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if not isinstance(command, click.Group) or command.invoke_without_command:
            found[f"{prefix} {name}"] = command
        if isinstance(command, click.Group):
            found.update(commands(command, f"{prefix} {name}"))
    return found


def test_every_command_has_json_and_quiet():
    every = commands(main)
    assert "zoo tokenizer encode" in every and "zoo runs show" in every and "zoo runs" in every
    lacking = {
        name: flag
        for name, command in every.items()
        for flag in ("--json", "--quiet")
        if not any(flag in option.opts for option in command.params)
    }
    assert lacking == {}


def test_show_for_scripts():
    name = smallest(lambda e: e.kind == "preset")
    shown = document("show", name)
    config = registry.resolve_config(name)
    assert shown["name"] == name and shown["family"] == registry.get_family(name).name
    assert {f["name"]: f["value"] for f in shown["fields"]} == {
        k: v for k, v in config.model_dump(mode="json").items() if k not in ("architecture", "preset")
    }
    lines = quiet("show", name)
    assert lines == [f"{f['name']}={json.dumps(f['value'])}" for f in shown["fields"]]


def test_validate_and_schema_for_scripts(tmp_path):
    overrides = ("--set", "trainer.max_epochs=3")
    assert document("validate", RECIPE, *overrides) == load_recipe(RECIPE, ["trainer.max_epochs=3"]).to_dict()
    assert quiet("validate", RECIPE, *overrides) == []  # the exit status is the verdict
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: {max_epochs: 0}\n")
    refused = invoke("validate", bad, "--json")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "trainer.max_epochs" in refused.stderr and "Traceback" not in refused.stderr
    out = tmp_path / "schema.json"
    assert document("schema", "-o", out) == {"path": str(out)}
    assert json.loads(out.read_text())["title"] == "Recipe"
    assert quiet("schema", "-o", out) == [str(out)]


@pytest.fixture
def classifier(tmp_path) -> Path:
    """A checkpoint of the default recipe's model, random weights."""
    name = load_recipe(RECIPE, tiny(tmp_path)).model.preset
    return zoo.save_checkpoint(zoo.create_model(name, framework="torch", seed=0), tmp_path / "c.safetensors")


def test_evaluate_and_finetune_for_scripts(classifier, tmp_path):
    sets = [arg for o in tiny(tmp_path, "trainer.max_epochs=1") for arg in ("--set", o)]
    metrics = document("evaluate", classifier, "--recipe", RECIPE, *sets)
    assert 0 <= metrics["test_accuracy"] <= 1 and "test_loss" in metrics
    line = quiet("evaluate", classifier, "--recipe", RECIPE, *sets)
    assert line == [", ".join(f"{k} {v:.6g}" for k, v in sorted(metrics.items()))]
    (checkpoint,) = quiet("finetune", RECIPE, "--from", classifier, *sets)
    assert Path(checkpoint).is_file() and Path(checkpoint).parent.parent == tmp_path


def test_an_error_with_json_leaves_stdout_empty(tmp_path):
    """A resume of a folder that is not a run: exit 2, one line on stderr, no document."""
    result = invoke("resume", tmp_path, "--json")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


def test_export_and_import_for_scripts(tmp_path):
    """The smallest preset a foreign weight layout can hold: out, in again, the same tensors."""
    formats = {n: [f.name for f in f.formats] for n, f in registry.families().items()}
    candidates = sorted(
        (e for e in registry.list_architectures() if e.kind == "preset" and formats[e.family]),
        key=lambda e: e.parameters,
    )
    for entry in candidates:  # a small preset may have no equivalent there (resnet's small stem)
        checkpoint = zoo.save_checkpoint(
            zoo.create_model(entry.name, framework="torch"), tmp_path / "m.safetensors"
        )
        layout = formats[entry.family][0]
        exported = invoke("export", checkpoint, "--format", layout, "--out", tmp_path / "out", "--json")
        if exported.exit_code == 0:
            break
        assert "cannot be written" in exported.stderr and exported.stdout == ""
    written = json.loads(exported.stdout)
    assert written == {"path": str(tmp_path / "out" / "model.safetensors"), "format": layout,
                       "kind": "weights", "checked": True}  # fmt: skip
    imported = document("import", tmp_path / "out", "--out", tmp_path / "back")
    tensors = len(json.loads(invoke("inspect", checkpoint, "--json").stdout)["tensors"])
    assert imported["format"] == layout and imported["tensors"] == tensors
    assert imported["family"] == entry.family and Path(imported["path"]).is_file()
    again = quiet("import", tmp_path / "out", "--out", tmp_path / "again.safetensors")
    assert again == [str(tmp_path / "again.safetensors")]


def test_deployment_export_for_scripts(classifier, tmp_path):
    report = document("export", classifier, "--format", "onnx", "--out", tmp_path / "m.onnx")
    assert report["path"] == str(tmp_path / "m.onnx") and report["kind"] == "deployment"
    assert report["checks"] and all(c["max_diff"] <= c["tolerance"] for c in report["checks"])
    assert report["max_diff"] == max(c["max_diff"] for c in report["checks"])
    assert [p["name"] for p in report["inputs"]] and report["framework"] == "lightning"
    again = quiet("export", classifier, "--format", "onnx", "--out", tmp_path / "m.onnx", "--overwrite")
    assert again == [str(tmp_path / "m.onnx")]


def test_sample_for_scripts(tmp_path):
    name = smallest(lambda e: e.tasks[0] == "language_modeling")
    model = zoo.create_model(name, framework="torch", seed=0, vocab_size=len(VOCAB))
    checkpoint = zoo.save_checkpoint(model, tmp_path / "lm.safetensors", vocab=VOCAB)
    args = ("sample", checkpoint, "--prompt", "abc", "--length", "5")
    done = document(*args)
    assert done["text"].startswith("abc") and len(done["ids"]) == 5
    assert done["prompt_ids"] == [VOCAB.index(c) for c in "abc"]
    assert done["text"] == "abc" + "".join(VOCAB[i] for i in done["ids"])
    assert quiet(*args) == done["text"].split("\n")


def test_tokenizer_for_scripts(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat; the cat ate the rat. " * 20)
    args = ("tokenizer", "train", text, "-o", tmp_path / "tok.json", "--vocab-size", "270")
    trained = document(*args)
    assert trained["path"] == str(tmp_path / "tok.json") and trained["vocab_size"] <= 270
    assert trained["characters"] == len(text.read_text()) and trained["files"] == [str(text)]
    assert quiet(*args) == [str(tmp_path / "tok.json")]
    encoded = document("tokenizer", "encode", tmp_path / "tok.json", "the cat")
    assert len(encoded["ids"]) == len(encoded["tokens"]) and "".join(encoded["tokens"]) == "the cat"
    assert quiet("tokenizer", "encode", tmp_path / "tok.json", "the cat") == [
        " ".join(map(str, encoded["ids"]))
    ]


@pytest.mark.parametrize("passed", [True, False])
def test_compare_for_scripts(monkeypatch, tmp_path, passed):
    """The command's side of ``zoo compare`` (the comparison itself is test_compare.py's): the
    report as the document, the verdict as the quiet line, exit status 1 when it differs."""
    # ``zoo.compare`` is the API's function once ``zoo.compare(...)`` has been called in this
    # process; the command imports it from the module, so patch the module.
    comparison = importlib.import_module("zoo.compare")
    verdict = "verdict: PASS (2 of 2)" if passed else "verdict: DIFFERS at step 1"
    result = types.SimpleNamespace(
        report={"run": {"steps": 2}}, passed=passed, files={"report": tmp_path / "report.md"},
        text=f"a report\n{verdict}",
    )  # fmt: skip
    monkeypatch.setattr(comparison, "compare", lambda *a, **k: result)
    status = 0 if passed else 1
    shown = invoke("compare", RECIPE, "--json")
    assert shown.exit_code == status and json.loads(shown.stdout) == {
        "run": {"steps": 2},
        "passed": passed,
        "files": {"report": str(tmp_path / "report.md")},
    }
    said = invoke("compare", RECIPE, "--quiet")
    assert said.exit_code == status and said.stdout == verdict + "\n"


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, where tqdm draws its bars."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("quiet_flag", "json_flag"), [(True, False), (False, True)])
def test_quiet_and_json_silence_the_progress_bars(monkeypatch, quiet_flag, json_flag):
    """A bar draws on a terminal; inside a --quiet or --json command (script_output) it draws
    nothing at all, and it draws again after."""
    from zoo.cli import script_output
    from zoo.progress import track

    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert list(track(range(3), "shown")) == [0, 1, 2]
    assert "shown" in stderr.getvalue()  # the terminal gets a bar: the check below can fail
    stderr.seek(0)
    stderr.truncate()
    with script_output(quiet_flag, json_flag):
        assert list(track(range(3), "hidden")) == [0, 1, 2]
    assert stderr.getvalue() == ""
    assert list(track(range(3), "shown again")) == [0, 1, 2]
    assert "shown again" in stderr.getvalue()
