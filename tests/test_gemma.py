"""The gemma family is transformers' Gemma3ForCausalLM and Gemma2ForCausalLM: same weights in, same
logits, gradients and tokens out, in both frameworks; its exports load back into transformers.

The oracle is ``tests/reference/hf_gemma.py``, run in the reference environment: a Gemma 3 of 3
layers (sliding, global, sliding; a window of 5 over 12 tokens), heads of 24 features with
``query_pre_attn_scalar`` 20, a global rope base of 1e6 with linear scaling 4 and a local base
of 1000, saved in shards; a Gemma 2 soft-capping its attention at 5 and its logits at 10 (both
bite on these weights); each seeded, every norm weight randomised, written by
``save_pretrained`` with its base model beside it; and random configs drawn here with
Hypothesis (head ratios and widths, windows, layer patterns, rotary bases and scaling,
soft-caps, tied or untied heads, padding ids), built and saved by the reference in one run.
Inputs carry a left- and a right-padded row; only real tokens are compared.

Tolerances, relative in the max norm: logits 1e-5 against transformers (measured 4.7e-7 torch,
1.0e-6 Keras); gradients 1e-5 of the largest (float32 rounding of sums over the batch);
generation token for token.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy
from click.testing import CliRunner
from conftest import eval_output as run
from conftest import max_diff, relative_error
from drawn_configs import assert_twins_are_transformers, reference_built
from hypothesis import strategies as st
from twin_gradients import keras_pass, largest_gap, torch_pass

import zoo
from architectures.gemma.formats import config_fields, from_hf, hf_config
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.cli import main
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.importing import import_checkpoint
from zoo.sample import Sampling, generate

LOGITS = 1e-5
GRADIENTS = 1e-5
FAMILY = registry.get_family("gemma")
FRAMEWORKS = ("lightning", "keras")
CASES = ("gemma3", "gemma2")
TYPES = ("gemma3_text", "gemma2")
RANDOM = int(os.environ.get("ZOO_PARITY_EXAMPLES", "10"))
# transformers' config fields zoo's config holds: an export must give them back as read.
FAMILY_FIELDS = (
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_activation", "max_position_embeddings",
    "rms_norm_eps", "rope_parameters", "attention_bias", "tie_word_embeddings", "sliding_window",
    "layer_types", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
    "attention_dropout", "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id",
)  # fmt: skip


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("hf_gemma.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imported")
    names = [*CASES, "gemma3-backbone"]
    return {name: import_checkpoint(reference / name, root / name).path for name in names}


@pytest.fixture(scope="module")
def models(imported) -> dict[tuple[str, str], object]:
    return {
        (name, fw): zoo.load_checkpoint(imported[name], framework=fw)
        for name in imported
        for fw in FRAMEWORKS
    }


def inputs(reference: Path, case: str) -> tuple[np.ndarray, np.ndarray]:
    return np.load(reference / f"{case}-inputs.npy"), np.load(reference / f"{case}-padding.npy")


def _files(reference: Path, case: str) -> tuple[dict[str, np.ndarray], dict]:
    tensors = {}
    for path in sorted((reference / case).glob("*.safetensors")):
        tensors |= safetensors.numpy.load_file(path)
    return tensors, json.loads((reference / case / "config.json").read_text())


# ------------------------------------------------------------------------- presets


def test_parameter_counts_are_transformers(reference):
    counts = json.loads((reference / "counts.json").read_text())
    listed = {e.name: e.parameters for e in zoo.list_architectures()}
    assert {name: listed[name] for name in counts} == counts
    assert listed["gemma"] == counts["gemma-3-270m"]  # the family's defaults


@pytest.mark.parametrize("preset", ["gemma-3-270m", "gemma-3-1b", "gemma-2-2b"])
def test_presets_are_the_published_configs(reference, preset):
    """Each preset is its model's config.json read by the hf format, field for field (Gemma 3 1B's
    leaves out layer_types: the pattern of 6 gives them)."""
    meta = json.loads((reference / "published" / preset / "config.json").read_text())
    fields = config_fields(meta, meta["model_type"])
    read = FAMILY.config(**fields, model_type=meta["model_type"], vocab_size=meta["vocab_size"])
    expected = registry.resolve_config(preset)
    assert read.kinds == expected.kinds
    keep = {"preset", "layer_types"}
    assert read.model_dump(exclude=keep) == expected.model_dump(exclude=keep)


# ---------------------------------------------------------------------- the models


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_logits_and_gradients_are_transformers(reference, imported, case, framework):
    """Both twins on the imported weights: transformers' logits on the real tokens of a left- and
    a right-padded batch, and every parameter's gradient of ``sum(logits * W)``."""
    ids, padding = inputs(reference, case)
    assert padding[:, 0].any() and padding[:, -1].any()
    config = read_checkpoint(imported[case]).config
    assert config.model_type == {"gemma3": "gemma3_text", "gemma2": "gemma2"}[case]
    model = zoo.load_checkpoint(imported[case], framework=framework)
    weights = np.load(reference / f"{case}-weights.npy")
    logits, grads = (torch_pass if framework == "lightning" else keras_pass)(model, ids, padding, weights)
    real = ~padding
    assert relative_error(logits[real], np.load(reference / f"{case}-logits.npy")[real]) <= LOGITS
    expected = dict(np.load(reference / f"{case}-gradients.npz"))
    assert set(grads) == set(expected)
    gap, worst = largest_gap(grads, expected)
    assert gap <= GRADIENTS, worst


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_base_model_imports_as_features(reference, imported, models, framework):
    ids, padding = inputs(reference, "gemma3")
    assert read_checkpoint(imported["gemma3-backbone"]).config.active_task == "features"
    got = run(models["gemma3-backbone", framework], ids, padding)
    assert relative_error(got[~padding], np.load(reference / "gemma3-hidden.npy")[~padding]) <= LOGITS


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_greedy_generation_is_transformers(reference, models, case, framework):
    """Left-padded prompts through the key/value cache, past the window: transformers' generate."""
    prompts = np.load(reference / f"{case}-prompts.npy")
    padding = np.load(reference / f"{case}-prompt-padding.npy")
    expected = np.load(reference / f"{case}-generated.npy")
    assert padding.any() and len(set(expected.ravel().tolist())) > 2  # not one token repeated
    got = generate(models[case, framework], prompts, expected.shape[1], Sampling(), padding_mask=padding)
    assert got.tolist() == expected.tolist()


# ------------------------------------------------------------ random configs, Hypothesis


@st.composite
def hf_configs(draw, model_type: str) -> dict:
    """A valid transformers config of class ``model_type`` and its batch: multi-query to
    multi-head, head widths apart from the width, windows shorter and longer than the input,
    Gemma 3's pattern or explicit layer types, rotary bases over five decades and linear
    scaling, Gemma 2's soft-caps, tied or untied, a padding id or none."""
    kv, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    steps, vocab, layers = draw(st.integers(3, 8)), draw(st.integers(2, 64)), draw(st.integers(1, 3))
    config = {
        "model_type": model_type, "hidden_size": kv * group * draw(st.integers(1, 6)),
        "num_attention_heads": kv * group, "num_key_value_heads": kv, "head_dim": 2 * draw(st.integers(1, 8)),
        "intermediate_size": draw(st.integers(1, 32)), "num_hidden_layers": layers, "vocab_size": vocab,
        "max_position_embeddings": draw(st.integers(steps, 32)),
        "rms_norm_eps": draw(st.sampled_from([1e-6, 1e-5, 1e-3])),
        "query_pre_attn_scalar": draw(st.sampled_from([1, 16, 256]) | st.integers(1, 300)),
        "sliding_window": draw(st.integers(1, 12)), "rope_theta": draw(st.floats(10.0, 1e6)),
        "tie_word_embeddings": draw(st.booleans()),
        "pad_token_id": draw(st.none() | st.integers(0, vocab - 1)),
    }  # fmt: skip
    if model_type == "gemma3_text":
        config["rope_local_base_freq"] = draw(st.floats(10.0, 1e6))
        if draw(st.booleans()):
            config["rope_scaling"] = {"rope_type": "linear", "factor": draw(st.floats(1.0, 16.0))}
        if draw(st.booleans()):
            config["layer_types"] = draw(st.lists(st.sampled_from(["full_attention", "sliding_attention"]),
                                                  min_size=layers, max_size=layers))  # fmt: skip
        else:
            config["sliding_window_pattern"] = draw(st.integers(1, 3))
    else:
        config["attn_logit_softcapping"] = draw(st.none() | st.floats(1.0, 60.0))
        config["final_logit_softcapping"] = draw(st.none() | st.floats(1.0, 40.0))
    return {
        "config": config,
        "batch": draw(st.integers(2, 4)),
        "steps": steps,
        "seed": draw(st.integers(0, 999)),
    }


@pytest.fixture(scope="module")
def random_reference(tmp_path_factory) -> tuple[Path, list[dict]]:
    return reference_built(
        "hf_gemma.py", tmp_path_factory.mktemp("random-reference"), hf_configs, TYPES, RANDOM
    )


@pytest.mark.parametrize("index", range(RANDOM))
def test_random_configs_are_transformers(random_reference, index, tmp_path):
    """Both twins on each drawn config's imported weights: transformers' logits on a padded batch."""
    reference, cases = random_reference
    assert_twins_are_transformers(reference, cases[index], tmp_path, LOGITS)


# ------------------------------------------------------------------ import and export


@pytest.mark.parametrize("case", [*CASES, "gemma3-backbone"])
def test_import_then_export_is_bit_identical(reference, imported, case, tmp_path):
    tensors, meta = _files(reference, case)
    path = export_checkpoint(imported[case], "hf", tmp_path / "out")
    back = safetensors.numpy.load_file(path)
    assert sorted(back) == sorted(tensors)
    assert [k for k in tensors if not np.array_equal(back[k], tensors[k])] == []
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert from_hf(back, written)[0] == from_hf(tensors, meta)[0]


@pytest.mark.parametrize("case", CASES)
def test_export_loads_in_transformers(reference, imported, case, tmp_path):
    """``zoo export --format hf`` of the import, moved off the file it came from: transformers loads
    every tensor strictly, gives the torch twin's logits and reads back the config it was
    imported from."""
    model = zoo.load_checkpoint(imported[case], framework="lightning")
    rng = np.random.default_rng(3)
    moved = {k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype) for k, v in model_tensors(model).items()}
    load_tensors(model, moved)
    checkpoint = zoo.save_checkpoint(model, tmp_path / "zoo" / "model.safetensors")
    result = CliRunner().invoke(
        main, ["export", str(checkpoint), "--format", "hf", "--out", str(tmp_path / "hf")]
    )
    assert result.exit_code == 0, result.output
    out = reference_env.run(
        "hf_gemma.py", tmp_path / "ref", "exported", str(tmp_path / "hf"),
        str(reference / f"{case}-inputs.npy"), str(reference / f"{case}-padding.npy"),
    )  # fmt: skip
    loaded = json.loads((out / "loaded.json").read_text())
    assert (loaded["missing_keys"], loaded["unexpected_keys"], loaded["mismatched_keys"]) == ([], [], [])
    assert loaded["class"] == json.loads((reference / case / "config.json").read_text())["architectures"][0]
    ids, padding = inputs(reference, case)
    assert relative_error(np.load(out / "logits.npy")[~padding], run(model, ids, padding)[~padding]) <= LOGITS
    read_back = json.loads((out / "config.json").read_text())
    original = json.loads((reference / f"{case}-config.json").read_text())
    assert {k: read_back.get(k) for k in FAMILY_FIELDS} == {k: original.get(k) for k in FAMILY_FIELDS}


def test_the_published_spelling_imports_as_transformers_5_writes_it(reference):
    """Published Gemma 3 files spell the rotary settings rope_theta, rope_local_base_freq and
    rope_scaling and leave layer_types to the pattern; transformers 5 writes rope_parameters per
    kind of layer and the layer types: the same model either way."""
    tensors, meta = _files(reference, "gemma3")
    legacy = {k: v for k, v in meta.items() if k not in ("rope_parameters", "layer_types")}
    legacy |= {"rope_theta": 1e6, "rope_local_base_freq": 1000.0, "sliding_window_pattern": 2,
               "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "num_hidden_layers": 3}  # fmt: skip
    read, expected = from_hf(tensors, legacy)[0], from_hf(tensors, meta)[0]
    assert FAMILY.config(**read).layer_windows == FAMILY.config(**expected).layer_windows
    assert {k: v for k, v in read.items() if k not in ("layer_types", "sliding_window_pattern")} == {
        k: v for k, v in expected.items() if k not in ("layer_types", "sliding_window_pattern")
    }


YARN = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 2.0}


@pytest.mark.parametrize(
    ("case", "change", "message"),
    [
        ("gemma3", {"hidden_activation": "gelu"}, r"hidden_activation 'gelu'"),
        ("gemma3", {"use_bidirectional_attention": True}, r"use_bidirectional_attention .*EmbeddingGemma"),
        ("gemma3", {"attn_logit_softcapping": 50.0}, r"transformers' Gemma 3 does not apply it"),
        ("gemma3", {"rope_parameters": {"full_attention": YARN, "sliding_attention": {"rope_theta": 1e4}}},
         r"rope_type 'yarn' on the global layers"),
        ("gemma3", {"quantization_config": {"quant_method": "gptq"}}, r"quantization_config"),
        ("gemma3", {"architectures": ["Gemma3ForConditionalGeneration"]}, r"vision tower is not built"),
        ("gemma3", {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"]}, r"have query/key norms"),
        ("gemma2", {"num_key_value_heads": 4}, r"num_key_value_heads 4 x head_dim 16 = 64, the k_proj rows"),
        ("gemma2", {"num_hidden_layers": 3}, r"num_hidden_layers says 3, the tensors 2"),
    ],
)  # fmt: skip
def test_the_format_refuses_what_zoo_cannot_compute(reference, case, change, message):
    tensors, meta = _files(reference, case)
    with pytest.raises(ForeignLayoutError, match=message):
        from_hf(tensors, {**meta, **change})


def test_export_refuses_what_the_class_cannot_hold():
    with pytest.raises(ForeignLayoutError, match=r"only Gemma 3 has the query/key norms .*gemma3_text"):
        hf_config(registry.resolve_config("gemma-micro", model_type="gemma2"))
    with pytest.raises(ForeignLayoutError, match=r"Gemma 3 does not apply it"):
        hf_config(registry.resolve_config("gemma-micro", attn_logit_softcapping=30.0))
    with pytest.raises(ForeignLayoutError, match=r"Gemma 2 has one rotary base"):
        hf_config(registry.resolve_config("gemma-2-2b", rope_local_base_freq=1e6))
    with pytest.raises(
        ForeignLayoutError, match=r"hidden_size 66 is not a multiple of num_attention_heads 4"
    ):
        hf_config(registry.resolve_config("gemma-micro", hidden_size=66))
    written = hf_config(registry.resolve_config("gemma-2-2b"))
    assert written["architectures"] == ["Gemma2ForCausalLM"] and written["layer_types"][:2] == [
        "sliding_attention", "full_attention",
    ]  # fmt: skip


def test_the_config_refuses_what_cannot_be_built():
    with pytest.raises(ValueError, match=r"layer_types names 1 layers but num_hidden_layers is 2"):
        registry.resolve_config("gemma-micro", layer_types=["full_attention"])
    with pytest.raises(ValueError, match=r"use num_key_value_heads in 1, 2, 4"):
        registry.resolve_config("gemma-micro", num_key_value_heads=3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_softcaps_gradient_is_torchs_where_tanh_saturates(dtype):
    """TensorFlow's float32 tanh is exactly 1 from x / cap = 8 on, torch's from about 9: the Keras
    softcap's gradient (zoo.nn.keras.activations.softcap) is torch's ``1 - tanh^2`` all the same,
    zero exactly where torch's is. Found by test_random_parity: a Gemma whose logits reached that
    far had every Keras gradient 3e-3 of the largest apart from torch's, its float64 twins agreeing."""
    import tensorflow as tf
    import torch

    from zoo.nn.keras.activations import softcap

    cap = 0.125
    z = np.concatenate([np.linspace(-25, 25, 2001), [7.9, 8.0, 8.25, 8.5, 9.0, 9.1, 9.5]])
    x = (z * cap).astype(dtype)
    reference = torch.tensor(x, requires_grad=True)
    (torch.tanh(reference / cap) * cap).sum().backward()
    expected = reference.grad.numpy()
    variable = tf.Variable(x)
    with tf.GradientTape() as tape:
        out = softcap(variable, cap)
    got = tape.gradient(out, variable).numpy()
    assert np.array_equal(got > 0, expected > 0)  # none zeroed early (TensorFlow's own tanh: from 8 on)
    assert max_diff(got, expected) <= 4 * np.finfo(dtype).eps
    forward = torch.tanh(torch.from_numpy(x) / cap).numpy() * cap
    # the forward is TensorFlow's tanh, a few ulps from torch's (float64: 3.5 eps * cap measured)
    assert max_diff(out.numpy(), forward) <= 8 * np.finfo(dtype).eps * cap
