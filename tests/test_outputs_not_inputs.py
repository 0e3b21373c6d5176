"""An output that resolves to an input of its command is refused, ``--overwrite`` or not: exit 2,
one line, the input's bytes untouched. Every command that writes, with every input it reads,
the implied ones too (an adapter's base, the tokenizer beside a checkpoint)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import digest, zoo_cli
from click.testing import CliRunner

from zoo import registry
from zoo.checkpoint.metadata import write_checkpoint
from zoo.cli import main
from zoo.initial_weights import initial_tensors as seeded
from zoo.lora import Adapter, base_digest, initial_tensors, write_adapter
from zoo.recipe.fine_tuning import LoraConfig


def tiny_adapter(folder: Path) -> tuple[Path, Path]:
    """A gpt2 base (``folder/base/model.safetensors``) and an adapter on it whose B is not zero."""
    family = registry.get_family("gpt2")
    config = family.config.model_validate(registry.expand("gpt2-micro", {"n_layer": 1, "vocab_size": 61}))
    tensors = seeded(family, config, 0)
    (folder / "base").mkdir(parents=True)
    base = write_checkpoint(folder / "base" / "model.safetensors", config, tensors, framework="lightning")
    adapter = Adapter.from_recipe(family, config, LoraConfig(rank=2, alpha=4, target=["q", "v"]))
    rng = np.random.default_rng(0)
    lora = {
        k: rng.normal(0, 0.1, v.shape).astype(np.float32) if k.endswith("lora_B") else v
        for k, v in initial_tensors(adapter, 0).items()
    }
    (folder / "run").mkdir()
    path = write_adapter(
        folder / "run" / "adapter.safetensors", family, config, adapter, lora,
        {"path": str(base.resolve()), "sha256": base_digest(tensors)}, framework="lightning",
    )  # fmt: skip
    return path, base


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("outputs")
    adapter, _ = tiny_adapter(folder)
    peft = CliRunner().invoke(
        main, ["export", str(adapter), "--format", "peft", "--out", str(folder / "peft")]
    )
    assert peft.exit_code == 0, peft.output
    return folder


def refused(args: list[str], *inputs: Path) -> str:
    before = {p: p.read_bytes() for p in inputs}
    result = CliRunner().invoke(main, [*args, "--overwrite"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "input" in lines[0], lines[0]
    for path, data in before.items():
        assert path.read_bytes() == data, f"{path} was changed"
    return lines[0]


A, B = "run/adapter.safetensors", "base/model.safetensors"
CASES = {  # name: (the command, its paths relative to the folder; the inputs that must stay)
    "merge onto the adapter": ("merge A --out A", A),
    "merge onto the base": ("merge A --out B", B),
    "merge into the base's folder": ("merge A --out base", B),
    "merge onto an explicit base": ("merge A --base B --out B", B),
    "import onto PEFT's weights": ("import peft --base B --out peft/adapter_model.safetensors",
                                   "peft/adapter_model.safetensors"),
    "import onto the base": ("import peft --base B --out B", B),
    "export hf onto the adapter": ("export A --format hf --out A", A),
    "export hf onto the base": ("export A --format hf --out base", B),
    "export a checkpoint onto itself": ("export B --format hf --out base", B),
    "export peft over the base's folder": ("export A --format peft --out out --base-out base", B),
    "export savedmodel over the base's folder": ("export A --format savedmodel --out base", B),
    "export savedmodel over the adapter's folder": ("export A --format savedmodel --out run", A),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_on_an_input_is_refused(case, made, monkeypatch):
    monkeypatch.chdir(made)
    monkeypatch.setenv("ZOO_CACHE", str(made / "cache"))
    command, kept = CASES[case]
    refused([{"A": A, "B": B}.get(word, word) for word in command.split()], made / kept)


def test_export_peft_onto_its_own_adapter_file_is_refused(made, tmp_path):
    """An adapter named as PEFT names its weights, exported into its own folder."""
    shutil.copy(made / "run" / "adapter.safetensors", tmp_path / "adapter_model.safetensors")
    source = tmp_path / "adapter_model.safetensors"
    refused(["export", str(source), "--format", "peft", "--out", str(tmp_path)], source)


def test_plot_onto_a_run_file_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("epoch,train_loss\n0,1.0\n")
    (run / "recipe.yaml").write_text("name: x\n")
    before = (run / "metrics.csv").read_bytes()
    result = CliRunner().invoke(main, ["plot", str(run), "-o", str(run / "metrics.csv")])
    assert result.exit_code == 2 and "input" in result.output, result.output
    assert (run / "metrics.csv").read_bytes() == before


def test_a_compare_report_onto_its_recipe_or_data_is_refused(tmp_path):
    """zoo compare -o DIR writes report.json/.md/.png there: never onto the recipe or --data file."""
    shipped = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
    recipe = tmp_path / "report.md"
    recipe.write_text(shipped.read_text())
    before = recipe.read_bytes()
    for args in (["compare", str(recipe), "-o", str(tmp_path)],
                 ["compare", str(shipped), "--data", str(recipe), "-o", str(tmp_path)]):  # fmt: skip
        result = CliRunner().invoke(main, args)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert "-o: " in lines[0] and "is an input of this command" in lines[0], lines[0]
        assert recipe.read_bytes() == before


def test_merging_into_the_run_folder_is_allowed_and_carries_the_tokenizer(made, tmp_path):
    """The adapter's own folder is no input to replace: model.safetensors is new there, and the
    tokenizer beside the adapter stays as it is."""
    from zoo.tokenizer import CharTokenizer

    run = tmp_path / "run"
    shutil.copytree(made / "run", run)
    CharTokenizer("abc\n").save(run)
    before = (run / "tokenizer.json").stat().st_mtime_ns
    result = CliRunner().invoke(main, ["merge", str(run / "adapter.safetensors"), "--out", str(run)])
    assert result.exit_code == 0, result.output
    assert (run / "model.safetensors").is_file()
    assert (run / "tokenizer.json").stat().st_mtime_ns == before  # the tokenizer is already there
    assert (run / "tokenizer_config.json").is_file()


def test_a_tokenizer_trained_onto_its_own_text_is_refused(tmp_path):
    text = tmp_path / "corpus.json"  # a name -o would write a tokenizer to
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    before = digest(text)
    code, out = zoo_cli("tokenizer", "train", text, "-o", text, "--vocab-size", "300")
    assert code == 2 and f"-o: {text} is an input of this command" in out, out
    assert digest(text) == before
