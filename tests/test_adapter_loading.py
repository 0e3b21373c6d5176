"""A LoRA adapter goes wherever a model goes: ``zoo.load``, ``zoo sample``, ``evaluate``,
``predict``, ``inspect`` and ``export`` take the adapter file of an ``init.lora`` run, or the run
folder, and give what its merged model (``zoo merge``) gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import tiny_lm_recipe

import zoo
from zoo.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """A finished one-epoch LoRA run of gpt2-micro on a seeded base, and its adapter merged."""
    folder = tmp_path_factory.mktemp("lora")
    recipe = tiny_lm_recipe(
        folder, "lora", optimizer={"lr": 0.03}, init={"lora": {"rank": 4, "train_bias": "lora_only"}}
    )
    done = zoo.train(recipe, "lightning")
    assert done.checkpoint.name == "adapter.safetensors"
    merged = CliRunner().invoke(main, ["merge", str(done.checkpoint), "--out", str(folder / "merged")])
    assert merged.exit_code == 0, merged.output
    return done.run_dir, folder / "merged" / "model.safetensors"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))


def sources(run) -> dict[str, Path]:
    folder, _ = run
    return {"adapter": folder / "adapter.safetensors", "run folder": folder}


def logits(model, ids: np.ndarray) -> np.ndarray:
    if hasattr(model, "state_dict"):
        import torch

        with torch.no_grad():
            return model.eval()(torch.from_numpy(ids)).numpy()
    return np.asarray(model(ids))


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_zoo_load_takes_an_adapter_and_its_run_folder(run, framework):
    from zoo.lora import load_adapter

    folder, merged = run
    whole = zoo.load(merged, framework)
    ids = whole.zoo_config.example_input(2, seed=1)
    expected = logits(whole, ids)
    assert (
        np.abs(expected - logits(load_adapter(folder / "adapter.safetensors", framework), ids)).max() < 1e-5
    )
    for what, path in sources(run).items():
        assert np.array_equal(logits(zoo.load(path, framework), ids), expected), what
    from zoo.api import load_checkpoint

    assert np.array_equal(logits(load_checkpoint(folder / "adapter.safetensors", framework), ids), expected)


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout  # stderr says where the adapter was merged


def test_sample_evaluate_and_predict_take_an_adapter_and_its_run_folder(run):
    folder, merged = run
    recipe = folder / "recipe.yaml"

    def outputs(path) -> tuple:
        sampled = json.loads(invoke("sample", path, "--prompt", "the ", "--length", "12", "--json"))
        metrics = json.loads(invoke("evaluate", path, "--recipe", recipe, "--json"))
        predicted = json.loads(invoke("predict", path, "--text", "a dog", "--length", "8", "--json"))
        return sampled["ids"], sampled["text"], metrics, predicted["predictions"]

    expected = outputs(merged)
    assert len(expected[0]) == 12 and expected[2]["test_loss"] > 0
    for what, path in sources(run).items():
        assert outputs(path) == expected, what


def test_inspect_shows_the_adapter_itself(run):
    for what, path in sources(run).items():
        info = json.loads(invoke("inspect", path, "--json"))
        assert info["metadata"]["kind"] == "adapter", what
        assert info["metadata"]["base"]["seed"] == 0 and len(info["metadata"]["base"]["sha256"]) == 64
        names = {name for name, _, _ in info["tensors"]}
        assert "h.0.attn.q.lora_A" in names and "wte.weight" not in names, what


def test_export_of_an_adapter_is_the_merged_model_s(run, tmp_path):
    from safetensors.numpy import load_file

    _, merged = run
    invoke("export", merged, "--format", "hf", "--out", tmp_path / "whole")
    expected = load_file(tmp_path / "whole" / "model.safetensors")
    for what, path in sources(run).items():
        out = tmp_path / what.replace(" ", "-")
        invoke("export", path, "--format", "hf", "--out", out)
        got = load_file(out / "model.safetensors")
        assert set(got) == set(expected) and all(np.array_equal(got[k], expected[k]) for k in got), what
        assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()


def end_of_text_tokenizer(folder: Path) -> None:
    """A character tokenizer.json of 60 tokens whose last is GPT-2's <|endoftext|>."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    chars = "\n abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,?!-:;'"[:59]
    backend = Backend(models.WordLevel({c: i for i, c in enumerate(chars)} | {"<|endoftext|>": 59}))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(["<|endoftext|>"])
    backend.save(str(folder / "tokenizer.json"))


def test_the_peft_export_names_a_base_peft_loads_and_carries_the_tokenizer(tmp_path):
    """zoo export --format peft --base-out: AutoPeftModelForCausalLM loads the folder alone (the
    base named by base_model_name_or_path) with zoo's logits; AutoTokenizer knows the end of text
    in the base's hf export and in the PEFT folder."""
    import reference_env
    from test_outputs_not_inputs import tiny_adapter

    adapter, base = tiny_adapter(tmp_path)
    end_of_text_tokenizer(base.parent)
    invoke("export", adapter, "--format", "peft", "--out", tmp_path / "peft", "--base-out", tmp_path / "hf")
    settings = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    assert settings["base_model_name_or_path"] == str((tmp_path / "hf").resolve())
    for folder in ("hf", "peft"):
        assert (
            json.loads((tmp_path / folder / "tokenizer_config.json").read_text())["eos_token"]
            == "<|endoftext|>"
        )
    model = zoo.load(adapter)
    ids = model.zoo_config.example_input(2, seed=1)
    np.save(tmp_path / "ids.npy", ids)
    ref = reference_env.run(
        "peft_auto.py",
        tmp_path / "ref",
        str(tmp_path / "peft"),
        str(tmp_path / "hf"),
        str(tmp_path / "ids.npy"),
    )
    assert np.abs(np.load(ref / "auto-logits.npy") - logits(model, ids)).max() <= 2e-5
    for found in json.loads((ref / "tokenizers.json").read_text()).values():
        assert found["eos_token"] == "<|endoftext|>" and found["eos_token_id"] == 59
        assert found["ids"] == [2, 3, 59]


def test_a_peft_export_without_a_loadable_base_says_so(tmp_path, caplog):
    from test_outputs_not_inputs import tiny_adapter

    adapter, _ = tiny_adapter(tmp_path)
    result = CliRunner().invoke(
        main, ["export", str(adapter), "--format", "peft", "--out", str(tmp_path / "p")]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "p" / "adapter_config.json").read_text())["base_model_name_or_path"] is None
    assert "--base-out" in caplog.text


def test_import_carries_the_tokenizer_config_and_merge_writes_one(tmp_path):
    """A transformers folder's tokenizer_config.json travels with zoo import (the special tokens'
    roles, which tokenizer.json does not say); zoo merge writes one beside the merged model."""
    from test_outputs_not_inputs import tiny_adapter

    adapter, base = tiny_adapter(tmp_path)
    end_of_text_tokenizer(base.parent)
    invoke("export", base, "--format", "hf", "--out", tmp_path / "hf")
    settings = {**json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text()), "model_max_length": 77}
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps(settings))
    invoke("import", tmp_path / "hf", "--out", tmp_path / "imported")
    assert json.loads((tmp_path / "imported" / "tokenizer_config.json").read_text()) == settings
    invoke("merge", adapter, "--out", tmp_path / "merged")
    merged = json.loads((tmp_path / "merged" / "tokenizer_config.json").read_text())
    assert merged["eos_token"] == "<|endoftext|>" and (tmp_path / "merged" / "tokenizer.json").is_file()
    sampled = json.loads(invoke("sample", tmp_path / "merged", "--prompt", "ab", "--length", "3", "--json"))
    assert len(sampled["ids"]) <= 3


def test_an_adapter_whose_base_is_gone_or_that_has_no_tokenizer_is_one_line(tmp_path):
    from test_outputs_not_inputs import tiny_adapter

    adapter, base = tiny_adapter(tmp_path)
    base.rename(tmp_path / "elsewhere.safetensors")
    for args in (["sample", str(adapter)], ["predict", str(adapter), "--text", "ab"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert f"the base it was trained on, {base}, is not there" in result.output
    (tmp_path / "elsewhere.safetensors").rename(base)
    result = CliRunner().invoke(main, ["sample", str(adapter), "--length", "2"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert f"error: {adapter}: has no tokenizer" in result.output.splitlines()[-1]


def test_resume_of_a_finished_lora_run_names_its_adapter(run, caplog):
    """A finished LoRA run has no model.safetensors: resume says so by the adapter it made."""
    folder, _ = run
    result = zoo.resume(folder)
    assert result.already_finished and result.checkpoint == folder / "adapter.safetensors"
    said = " ".join(record.getMessage() for record in caplog.records)
    assert f"zoo merge {folder / 'adapter.safetensors'} --out MERGED" in said
    assert "model.safetensors" not in said
