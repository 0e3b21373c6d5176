"""The gpt2 family is transformers' GPT2LMHeadModel: same weights in, same logits and tokens out,
in both frameworks.

The oracle is ``tests/reference/hf_gpt2.py``, run once in the reference environment: transformers'
``GPT2LMHeadModel`` at a tiny shape (2 blocks, width 64, vocabulary 101, batch 3 of 12 tokens) and
at gpt2's own (12 blocks, width 768, vocabulary 50257, batch 2 of 8 tokens), seeded, every
LayerNorm weight and bias and every other bias randomised, written by ``save_pretrained``; its
backbone (``GPT2Model``) alone beside it. Inputs carry a padding mask with a left-padded and a
right-padded row; transformers gets the matching attention mask and the position ids its
``generate`` derives from it, and only real tokens are compared.

Tolerance: relative error in the max norm, ``max |zoo - hf| / max |hf|`` over the real tokens, at
most 1e-4 (float32), in eval mode. Measured (torch 2.13, TF 2.21, CPU): logits 4.0e-7 (tiny) and
7.4e-7 (gpt2) from the torch twin, 4.6e-7 and 1.1e-6 from the Keras twin; the backbone's hidden
states 3.9e-7 and 5.5e-7 (tiny); greedy continuations equal transformers'
``generate(do_sample=False)`` token for token in both twins.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy
import torch
from conftest import cached_logits, perturbed_twins, relative_error
from conftest import eval_output as run

import zoo
from architectures.gpt2.formats import from_hf
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.importing import import_checkpoint
from zoo.nn.errors import InputError
from zoo.sample import Sampling, generate

REFERENCE = 1e-4  # relative, max norm: zoo's twins against transformers
TWINS = 1e-5  # the twins against each other on the same weights
FAMILY = registry.get_family("gpt2")
FRAMEWORKS = ("lightning", "keras")


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("hf_gpt2.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[str, Path]:
    """Each transformers directory through ``zoo import``."""
    root = tmp_path_factory.mktemp("imported")
    return {
        name: import_checkpoint(reference / name, root / name).path
        for name in ("tiny", "tiny-backbone", "gpt2")
    }


@pytest.fixture(scope="module")
def models(imported) -> dict[tuple[str, str], object]:
    """Each imported checkpoint loaded once per framework (gpt2 has 124M parameters)."""
    return {
        (name, framework): zoo.load_checkpoint(imported[name], framework=framework)
        for name in imported
        for framework in FRAMEWORKS
    }


# ------------------------------------------------------------------------------ the model


def test_parameter_counts_are_transformers(reference):
    counts = json.loads((reference / "counts.json").read_text())
    listed = {e.name: e.parameters for e in zoo.list_architectures()}
    assert listed["gpt2"] == counts["gpt2"]
    assert listed["gpt2-medium"] == counts["gpt2-medium"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", ["tiny", "gpt2"])
def test_logits_are_transformers(reference, imported, models, case, framework):
    ids, padding = np.load(reference / f"{case}-inputs.npy"), np.load(reference / f"{case}-padding.npy")
    expected = np.load(reference / f"{case}-logits.npy")
    assert padding.any() and not padding.all()
    assert read_checkpoint(imported[case]).config.active_task == "language_modeling"
    got = run(models[case, framework], ids, padding)
    assert got.shape == expected.shape
    assert relative_error(got[~padding], expected[~padding]) <= REFERENCE


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_backbone_imports_as_features(reference, imported, models, framework):
    """A ``GPT2Model`` directory (no ``transformer.`` prefix) is the features task: the final
    LayerNorm's hidden states, transformers' ``last_hidden_state``."""
    ids, padding = np.load(reference / "tiny-inputs.npy"), np.load(reference / "tiny-padding.npy")
    expected = np.load(reference / "tiny-hidden.npy")
    assert read_checkpoint(imported["tiny-backbone"]).config.active_task == "features"
    got = run(models["tiny-backbone", framework], ids, padding)
    assert relative_error(got[~padding], expected[~padding]) <= REFERENCE


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", ["tiny", "gpt2"])
def test_greedy_generation_is_transformers(reference, models, case, framework):
    """Left-padded prompts through the key/value cache: transformers' generate, token for token."""
    prompts, padding = (
        np.load(reference / f"{case}-prompts.npy"),
        np.load(reference / f"{case}-prompt-padding.npy"),
    )
    expected = np.load(reference / f"{case}-generated.npy")
    assert padding.any()
    model = models[case, framework]
    got = generate(model, prompts, expected.shape[1], Sampling(), padding_mask=padding)
    assert got.tolist() == expected.tolist()


def test_padding_changes_nothing(reference):
    """The left-padded prompt's continuation is the unpadded prompt's (transformers' too)."""
    assert (
        np.load(reference / "tiny-alone.npy")[0].tolist()
        == np.load(reference / "tiny-generated.npy")[1].tolist()
    )


def _random_twins(**overrides):
    dropout_off = {"resid_dropout": 0.0, "embd_dropout": 0.0, "attn_dropout": 0.0}
    return perturbed_twins("gpt2-micro", vocab_size=97, n_positions=24, **dropout_off, **overrides)


def test_the_cache_computes_the_full_forward():
    """A prompt and then one token per decode call: each step's logits are the full forward's at
    that position, in both twins; past n_positions, generation re-reads the last window."""
    config, torch_model, keras_model = _random_twins()
    ids = np.random.default_rng(0).integers(0, config.vocab_size, size=(2, 12))
    padding = np.zeros_like(ids, bool)
    padding[1, :4] = True
    full = run(torch_model, ids, padding)
    for model in (torch_model, keras_model):
        got, cache = cached_logits(model, ids, padding, prompt=5)
        assert cache.length == 12
        assert relative_error(got, full[:, 4:]) <= TWINS
    long = [generate(m, ids[:, :20], 10, Sampling()) for m in (torch_model, keras_model)]
    assert long[0].tolist() == long[1].tolist()


def test_the_head_is_the_token_embedding():
    """One tensor in the checkpoint; changing the embedding changes the logits in both twins."""
    config, torch_model, keras_model = _random_twins()
    assert "lm_head.weight" not in torch_model.state_dict()
    assert not any("head" in v.path for v in keras_model.weights)
    ids = config.example_input(2)
    tensors = model_tensors(torch_model)
    tensors["wte.weight"] = 2 * tensors["wte.weight"]
    for model in (torch_model, keras_model):
        before = run(model, ids, None)
        load_tensors(model, tensors)
        h = run(model, ids, None)
        assert not np.allclose(before, h)
    assert relative_error(run(keras_model, ids, None), run(torch_model, ids, None)) <= TWINS


def test_both_twins_refuse_what_gpt2_cannot_take():
    config, torch_model, keras_model = _random_twins()
    too_long = np.zeros((1, config.n_positions + 1), dtype=np.int64)
    for model in (torch_model, keras_model):
        with pytest.raises(InputError, match=r"at most n_positions 24 tokens .* a sequence of 25 tokens"):
            run(model, too_long, None)
    with pytest.raises(InputError, match="no token types"):
        torch_model(
            torch.zeros((1, 3), dtype=torch.long), token_type_ids=torch.zeros((1, 3), dtype=torch.long)
        )
    with pytest.raises(InputError, match="no token types"):
        keras_model(np.zeros((1, 3)), token_type_ids=np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"n_embd 64 is not divisible by n_head 5; .*n_head in"):
        registry.resolve_config("gpt2-micro", n_head=5)


# ---------------------------------------------------------------- the transformers format


def _tiny_files(reference: Path) -> tuple[dict[str, np.ndarray], dict]:
    folder = reference / "tiny"
    return safetensors.numpy.load_file(folder / "model.safetensors"), json.loads(
        (folder / "config.json").read_text()
    )


def test_import_then_export_is_bit_identical(reference, imported, tmp_path):
    tensors, meta = _tiny_files(reference)
    path = export_checkpoint(imported["tiny"], "hf", tmp_path / "out")
    back = safetensors.numpy.load_file(path)
    assert sorted(back) == sorted(tensors)
    assert [k for k in tensors if not np.array_equal(back[k], tensors[k])] == []
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    for key in ("model_type", "architectures", "n_embd", "n_layer", "n_head", "n_positions", "vocab_size"):
        assert written[key] == meta[key], key


def test_older_files_with_mask_buffers_and_a_written_head_import(reference):
    """``attn.bias`` / ``attn.masked_bias`` buffers are skipped, a head equal to wte is dropped."""
    tensors, meta = _tiny_files(reference)
    older = {
        **tensors,
        "lm_head.weight": tensors["transformer.wte.weight"].copy(),
        "transformer.h.0.attn.bias": np.tril(np.ones((1, 1, 32, 32), np.float32)),
        "transformer.h.0.attn.masked_bias": np.array(-1e4, np.float32),
    }
    fields, canonical = from_hf(older, meta)
    expected_fields, expected = from_hf(tensors, meta)
    assert fields == expected_fields
    assert sorted(canonical) == sorted(expected)
    assert all(np.array_equal(canonical[k], expected[k]) for k in expected)


def test_the_format_refuses_what_zoo_cannot_represent(reference):
    tensors, meta = _tiny_files(reference)
    with pytest.raises(ForeignLayoutError, match=r"activation_function 'relu'"):
        from_hf(tensors, {**meta, "activation_function": "relu"})
    with pytest.raises(ForeignLayoutError, match=r"add_cross_attention True"):
        from_hf(tensors, {**meta, "add_cross_attention": True})
    with pytest.raises(ForeignLayoutError, match=r"tie_word_embeddings False"):
        from_hf(tensors, {**meta, "tie_word_embeddings": False})
    untied = {**tensors, "lm_head.weight": tensors["transformer.wte.weight"] + 1}
    with pytest.raises(ForeignLayoutError, match=r"lm_head.weight differs from transformer.wte.weight"):
        from_hf(untied, meta)
    with pytest.raises(ForeignLayoutError, match=r"GPT2ForSequenceClassification"):
        from_hf(tensors, {**meta, "architectures": ["GPT2ForSequenceClassification"]})
    with pytest.raises(ForeignLayoutError, match=r"n_layer says 3, the tensors 2"):
        from_hf(tensors, {**meta, "n_layer": 3})
    with pytest.raises(
        ForeignLayoutError, match=r"how many attention heads their width-64 GPT-2 has.*--num-heads"
    ):
        from_hf(tensors, {})


def test_export_loads_in_transformers(reference, imported, models, tmp_path):
    """``zoo export --format hf`` of the tiny import, randomised further so that it is not the file
    it came from: transformers' from_pretrained loads every tensor, re-ties the head, and gives
    the torch twin's logits."""
    model = models["tiny", "lightning"]
    rng = np.random.default_rng(3)
    changed = {k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype) for k, v in model_tensors(model).items()}
    load_tensors(model, changed)
    try:
        checkpoint = zoo.save_checkpoint(model, tmp_path / "zoo.safetensors")
        from click.testing import CliRunner

        from zoo.cli import main

        result = CliRunner().invoke(
            main, ["export", str(checkpoint), "--format", "hf", "--out", str(tmp_path / "hf")]
        )
        assert result.exit_code == 0, result.output
        ids, padding = np.load(reference / "tiny-inputs.npy"), np.load(reference / "tiny-padding.npy")
        out = reference_env.run(
            "hf_gpt2.py", tmp_path / "ref", "exported", str(tmp_path / "hf"),
            str(reference / "tiny-inputs.npy"), str(reference / "tiny-padding.npy"),
        )  # fmt: skip
        loaded = json.loads((out / "loaded.json").read_text())
        assert loaded["class"] == "GPT2LMHeadModel" and loaded["tied"]
        assert loaded["missing_keys"] == [] and loaded["unexpected_keys"] == []
        assert loaded["mismatched_keys"] == []
        expected = run(model, ids, padding)
        assert relative_error(np.load(out / "logits.npy")[~padding], expected[~padding]) <= REFERENCE
    finally:
        load_tensors(model, from_hf(*_tiny_files(reference))[1])
