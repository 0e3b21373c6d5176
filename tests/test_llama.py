"""The llama family is transformers' LlamaForCausalLM (Mistral's, Qwen2's): same weights in, same logits
and tokens out, in both frameworks; its exports load back into transformers.

The oracle is ``tests/reference/hf_llama.py``, run in the reference environment: transformers'
models at tiny shapes (a Llama with grouped-query attention, a padding id and a tokenizer; an
untied Llama with one key/value head, every bias, an explicit head_dim and llama3 rope scaling;
a Mistral with a 5-token sliding window, shorter than its inputs; a Qwen2 with its query/key/value
biases and a window on its second layer only, saved in shards), seeded, every RMSNorm weight and
bias randomised, written by ``save_pretrained``, with their base models beside them; and random
configs drawn here with Hypothesis (grouped-query ratios, head widths, rope_theta, llama3 scaling,
tied or untied, biases, windows on every layer (Mistral) or from max_window_layers on (Qwen2,
Qwen3), all four classes),
which the reference builds, randomises and saves in one run. Inputs carry a left- and a
right-padded row; transformers gets the matching attention mask and the position ids its
``generate`` derives from it, and only real tokens are compared. The published configs'
parameter counts come from transformers on the meta device.

Tolerance: relative error in the max norm, ``max |zoo - hf| / max |hf|`` over the real tokens, at
most 1e-5 (float32), in eval mode. Measured (torch 2.13, TF 2.21, CPU): 2.8e-7 to 5.3e-7 from the
torch twin, 3.4e-7 to 8.6e-7 from the Keras twin on the four cases; greedy continuations equal
transformers' ``generate(do_sample=False)`` token for token in both twins.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy
import torch
from click.testing import CliRunner
from conftest import cached_logits, perturbed_twins, relative_error
from conftest import eval_output as run
from drawn_configs import assert_twins_are_transformers, reference_built
from hypothesis import strategies as st

import zoo
from architectures.llama.config_json import config_fields, hf_config
from architectures.llama.formats import from_hf
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.cli import main
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.importing import import_checkpoint
from zoo.nn.errors import InputError
from zoo.sample import Sampling, generate

REFERENCE = 1e-5  # relative, max norm, against transformers (issue 42's bound; measured <= 8.6e-7)
TWINS = 1e-5  # the twins against each other on the same weights
FAMILY = registry.get_family("llama")
FRAMEWORKS = ("lightning", "keras")
CASES = (
    "llama",
    "llama-untied",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "phi3-longrope",
    "mixtral",
    "qwen3_moe",
)
# the transformers classes the random configs draw
TYPES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe")
RANDOM = int(os.environ.get("ZOO_PARITY_EXAMPLES", "10"))  # random configs against transformers
# transformers' config fields zoo's config holds: an export must give them back as read.
FAMILY_FIELDS = (
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings",
    "rms_norm_eps", "rope_parameters", "attention_bias", "mlp_bias", "tie_word_embeddings",
    "sliding_window", "use_sliding_window", "layer_types", "attention_dropout", "initializer_range",
    "bos_token_id", "eos_token_id", "pad_token_id", "num_local_experts", "num_experts_per_tok",
    "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
    "router_aux_loss_coef", "output_router_logits",
)  # fmt: skip


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("hf_llama.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[str, Path]:
    """Each transformers directory through ``zoo import`` (the Qwen2 one is sharded)."""
    root = tmp_path_factory.mktemp("imported")
    names = [*CASES, "llama-backbone", "qwen2-backbone"]
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


# ------------------------------------------------------------------------- presets


def test_parameter_counts_are_transformers(reference):
    counts = json.loads((reference / "counts.json").read_text())
    listed = {e.name: e.parameters for e in zoo.list_architectures()}
    assert {name: listed[name] for name in counts} == counts
    assert listed["llama"] == counts["smollm-135m"]  # the family's defaults


@pytest.mark.parametrize(
    "preset",
    [
        "smollm-135m", "smollm-360m", "qwen2-0.5b", "llama-3.2-1b", "qwen3-0.6b", "qwen3-1.7b", "phi-3-mini",
        "mixtral-8x7b", "qwen3-30b-a3b",
    ],
)  # fmt: skip
def test_presets_are_the_published_configs(reference, preset):
    """Each preset is its model's config.json read by the hf format, field for field."""
    meta = json.loads((reference / "published" / preset / "config.json").read_text())
    fields = config_fields(meta, meta["model_type"])
    read = FAMILY.config(**fields, model_type=meta["model_type"], vocab_size=meta["vocab_size"])
    expected = registry.resolve_config(preset)
    assert read.model_dump(exclude={"preset"}) == expected.model_dump(exclude={"preset"})


# ---------------------------------------------------------------------- the models


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_logits_are_transformers(reference, imported, models, case, framework):
    ids, padding = inputs(reference, case)
    expected = np.load(reference / f"{case}-logits.npy")
    assert padding[:, 0].any() and padding[:, -1].any()  # left and right padding
    config = read_checkpoint(imported[case]).config
    assert (config.active_task, config.model_type) == ("language_modeling", case.split("-")[0])
    got = run(models[case, framework], ids, padding)
    assert got.shape == expected.shape
    assert relative_error(got[~padding], expected[~padding]) <= REFERENCE


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", ["llama", "qwen2"])
def test_base_model_imports_as_features(reference, imported, models, case, framework):
    """A ``*Model`` directory (no ``model.`` prefix) is the features task: the final RMSNorm's
    hidden states, transformers' ``last_hidden_state``."""
    ids, padding = inputs(reference, case)
    expected = np.load(reference / f"{case}-hidden.npy")
    assert read_checkpoint(imported[f"{case}-backbone"]).config.active_task == "features"
    got = run(models[f"{case}-backbone", framework], ids, padding)
    assert relative_error(got[~padding], expected[~padding]) <= REFERENCE


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_greedy_generation_is_transformers(reference, models, case, framework):
    """Left-padded prompts through the key/value cache: transformers' generate, token for token."""
    prompts = np.load(reference / f"{case}-prompts.npy")
    padding = np.load(reference / f"{case}-prompt-padding.npy")
    expected = np.load(reference / f"{case}-generated.npy")
    assert padding.any()
    got = generate(models[case, framework], prompts, expected.shape[1], Sampling(), padding_mask=padding)
    assert got.tolist() == expected.tolist()


# ------------------------------------------------------------ random configs, Hypothesis


@st.composite
def hf_configs(draw, model_type: str) -> dict:
    """A valid transformers config of class ``model_type``, with its input batch: grouped-query
    ratios from multi-query to multi-head, head widths given or derived, rope_theta over six
    decades, llama3 scaling or none, tied or untied, Llama's biases on or off, a padding id."""
    kv, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    heads = kv * group
    head_dim = 2 * draw(st.integers(1, 8))
    explicit = model_type == "qwen3" or (model_type != "qwen2" and draw(st.booleans()))
    hidden = heads * (2 * draw(st.integers(1, 6)) if explicit else head_dim)
    steps, vocab = draw(st.integers(3, 8)), draw(st.integers(2, 64))
    context = draw(st.integers(steps, 32))
    config = {
        "model_type": model_type, "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": draw(st.integers(1, 32)), "num_hidden_layers": draw(st.integers(1, 2)),
        "vocab_size": vocab, "max_position_embeddings": context,
        "rms_norm_eps": draw(st.sampled_from([1e-6, 1e-5, 1e-3])),
        "rope_theta": draw(st.sampled_from([10.0, 500.0, 10000.0, 1e6]) | st.floats(2.0, 1e5)),
        "tie_word_embeddings": draw(st.booleans()),
        "pad_token_id": draw(st.none() | st.integers(0, vocab - 1)),
    }  # fmt: skip
    if explicit:
        config["head_dim"] = head_dim
    if draw(st.booleans()):
        low = draw(st.floats(0.5, 2.0))
        config["rope_scaling"] = {
            "rope_type": "llama3", "factor": draw(st.floats(1.0, 32.0)), "low_freq_factor": low,
            "high_freq_factor": low + draw(st.floats(0.5, 4.0)),
            "original_max_position_embeddings": draw(st.integers(1, context)),
        }  # fmt: skip
    if model_type == "llama":
        config |= {"attention_bias": draw(st.booleans()), "mlp_bias": draw(st.booleans())}
    if model_type in ("qwen3", "qwen3_moe"):
        config["attention_bias"] = draw(st.booleans())
    if model_type in ("mistral", "mixtral"):
        config["sliding_window"] = draw(st.none() | st.integers(1, 64))  # shorter than the input too
    if model_type in ("mixtral", "qwen3_moe"):  # from one expert to five, one to all chosen
        # widths of whole 16-byte rows: transformers' grouped expert kernel refuses others
        config["hidden_size"] = heads * 4 * draw(st.integers(1, 3))
        config["intermediate_size"] = 4 * draw(st.integers(1, 8))
        experts = draw(st.integers(1, 5))
        config |= {"num_local_experts" if model_type == "mixtral" else "num_experts": experts,
                   "num_experts_per_tok": draw(st.integers(1, experts))}  # fmt: skip
    if model_type == "qwen3_moe":
        layers = config["num_hidden_layers"]
        config |= {
            "moe_intermediate_size": 4 * draw(st.integers(1, 6)), "norm_topk_prob": draw(st.booleans()),
            "decoder_sparse_step": draw(st.integers(1, 2)),
            "mlp_only_layers": draw(st.lists(st.integers(0, layers - 1), unique=True, max_size=layers)),
        }  # fmt: skip
    if model_type in ("qwen2", "qwen3", "qwen3_moe") and draw(
        st.booleans()
    ):  # some, all or no layers windowed
        config |= {
            "use_sliding_window": True, "sliding_window": draw(st.integers(1, 64)),
            "max_window_layers": draw(st.integers(0, config["num_hidden_layers"])),
        }  # fmt: skip
    return {
        "config": config,
        "batch": draw(st.integers(2, 4)),
        "steps": steps,
        "seed": draw(st.integers(0, 999)),
    }


@pytest.fixture(scope="module")
def random_reference(tmp_path_factory) -> tuple[Path, list[dict]]:
    return reference_built(
        "hf_llama.py", tmp_path_factory.mktemp("random-reference"), hf_configs, TYPES, RANDOM
    )


@pytest.mark.parametrize("index", range(RANDOM))
def test_random_configs_are_transformers(random_reference, index, tmp_path):
    """Both twins on each drawn config's imported weights: transformers' logits on a padded batch."""
    reference, cases = random_reference
    assert_twins_are_transformers(reference, cases[index], tmp_path, REFERENCE)


# ---------------------------------------------------------------- the twins themselves


def _random_twins(**overrides):
    return perturbed_twins("llama-micro", vocab_size=97, max_position_embeddings=24, **overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"num_key_value_heads": 1, "tie_word_embeddings": False},
        {"model_type": "qwen3", "qk_norm": True, "head_dim": 24},
    ],
)
def test_the_cache_computes_the_full_forward(overrides):
    """A prompt and then one token per decode call: each step's logits are the full forward's at
    that position, in both twins; past the context, generation re-reads the last window."""
    config, torch_model, keras_model = _random_twins(**overrides)
    ids = np.random.default_rng(0).integers(0, config.vocab_size, size=(2, 12))
    padding = np.zeros_like(ids, bool)
    padding[1, :4] = True
    full = run(torch_model, ids, padding)
    for model in (torch_model, keras_model):
        got, cache = cached_logits(model, ids, padding, prompt=5)
        assert cache.length == 12 and cache.layers[0][0].shape[1] == config.key_value_heads
        assert relative_error(got, full[:, 4:]) <= TWINS
    long = [generate(m, ids[:, :20], 10, Sampling()) for m in (torch_model, keras_model)]
    assert long[0].tolist() == long[1].tolist()


def test_a_tied_head_is_the_token_embedding_and_an_untied_one_is_its_own():
    config, torch_model, keras_model = _random_twins()
    assert "lm_head.weight" not in torch_model.state_dict()
    ids = config.example_input(2)
    tensors = model_tensors(torch_model)
    tensors["embed_tokens.weight"] = 2 * tensors["embed_tokens.weight"]
    for model in (torch_model, keras_model):
        before = run(model, ids, None)
        load_tensors(model, tensors)
        assert not np.allclose(before, run(model, ids, None))
    _, untied, _ = _random_twins(tie_word_embeddings=False)
    assert untied.state_dict()["lm_head.weight"].shape == (97, 64)


def test_the_padding_row_gets_no_gradient_in_either_twin():
    """transformers' ``padding_idx``: the pad token's embedding row starts at zero and the lookup
    gives it no gradient (the tied head still does), in both twins alike."""
    import tensorflow as tf

    config, torch_model, keras_model = _random_twins(pad_token_id=3, tie_word_embeddings=False)
    assert not FAMILY.build_torch(config).embed_tokens.weight[3].any()
    ids = np.array([[3, 3, 5, 7, 3, 9]])
    torch_model.train()
    torch_model(torch.from_numpy(ids)).sum().backward()
    torch_grad = torch_model.embed_tokens.weight.grad.numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(keras_model(ids, training=True))
    keras_grad = np.asarray(tf.convert_to_tensor(tape.gradient(loss, keras_model.embed_tokens.embeddings)))
    assert not torch_grad[3].any() and torch_grad[5].any()
    assert relative_error(keras_grad, torch_grad) <= TWINS


def test_both_twins_refuse_what_llama_cannot_take():
    config, torch_model, keras_model = _random_twins()
    too_long = np.zeros((1, config.max_position_embeddings + 1), dtype=np.int64)
    for model in (torch_model, keras_model):
        with pytest.raises(InputError, match=r"at most max_position_embeddings 24 tokens .* of 25 tokens"):
            run(model, too_long, None)
    with pytest.raises(InputError, match="no token types"):
        torch_model(
            torch.zeros((1, 3), dtype=torch.long), token_type_ids=torch.zeros((1, 3), dtype=torch.long)
        )
    with pytest.raises(InputError, match="no token types"):
        keras_model(np.zeros((1, 3)), token_type_ids=np.zeros((1, 3)))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_attention_heads": 5}, r"hidden_size 64 is not divisible by num_attention_heads 5"),
        (
            {"num_key_value_heads": 3},
            r"num_attention_heads 4 is not a multiple of num_key_value_heads 3; .* in 1, 2, 4",
        ),
        ({"head_dim": 7}, r"head width is 7 \(head_dim\); rotary .* even head_dim"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            r"rope_scaling\n.*tag 'yarn'.*'llama3', 'longrope'",
        ),
        (
            {"rope_scaling": {"low_freq_factor": 4, "high_freq_factor": 1}},
            r"high_freq_factor 1.0 must be greater",
        ),
        ({"pad_token_id": 500, "vocab_size": 100}, r"pad_token_id 500 is not below vocab_size 100"),
        ({"layer_types": ["full_attention"]}, r"layer_types names 1 layers but num_hidden_layers is 2"),
        ({"hidden_act": "gelu"}, r"hidden_act\n.*'silu' or 'swish'"),
    ],
)
def test_the_config_refuses_what_the_twins_do_not_compute(fields, message):
    with pytest.raises(ValueError, match=message):
        registry.resolve_config("llama-micro", **fields)
    assert registry.resolve_config("llama-micro", sliding_window=256).attention_window is None  # covers it
    assert registry.resolve_config("llama-micro", sliding_window=100).attention_window == 100


def test_validate_names_the_refused_field(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model:\n  architecture: llama-micro\n  sliding_window: 0\ndata:\n  name: text\n")
    result = CliRunner().invoke(main, ["validate", str(recipe)])
    assert result.exit_code == 2
    assert "model.sliding_window" in result.output and "greater than or equal to 1" in result.output


# ---------------------------------------------------------------- the transformers format


def _files(reference: Path, case: str) -> tuple[dict[str, np.ndarray], dict]:
    folder = reference / case
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        tensors |= safetensors.numpy.load_file(path)
    return tensors, json.loads((folder / "config.json").read_text())


@pytest.mark.parametrize("case", [*CASES, "llama-backbone"])
def test_import_then_export_is_bit_identical(reference, imported, case, tmp_path):
    tensors, meta = _files(reference, case)
    path = export_checkpoint(imported[case], "hf", tmp_path / "out")
    back = safetensors.numpy.load_file(path)
    assert sorted(back) == sorted(tensors)
    assert [k for k in tensors if not np.array_equal(back[k], tensors[k])] == []
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert from_hf(back, written)[0] == from_hf(tensors, meta)[0]


def test_legacy_rope_spelling_and_older_buffers_import(reference):
    """Published files spell the rotary settings ``rope_theta`` + ``rope_scaling`` and older ones
    carry ``rotary_emb.inv_freq`` buffers and the tied head: the same model either way."""
    tensors, meta = _files(reference, "llama-untied")
    legacy = {k: v for k, v in meta.items() if k != "rope_parameters"}
    legacy |= {
        "rope_theta": 10000.0,
        "rope_scaling": {k: v for k, v in meta["rope_parameters"].items() if k != "rope_theta"},
    }
    older = {**tensors, "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(12, np.float32)}
    assert from_hf(older, legacy)[0] == from_hf(tensors, meta)[0]
    tied, tied_meta = _files(reference, "llama")
    with_head = {**tied, "lm_head.weight": tied["model.embed_tokens.weight"].copy()}
    assert sorted(from_hf(with_head, tied_meta)[1]) == sorted(from_hf(tied, tied_meta)[1])


@pytest.mark.parametrize(
    ("case", "change", "message"),
    [
        ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, r"rope_type 'yarn'"),
        ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, r"rope_type 'dynamic'"),
        ("llama", {"partial_rotary_factor": 0.5}, r"partial_rotary_factor 0.5"),
        ("llama", {"hidden_act": "gelu"}, r"hidden_act 'gelu'"),
        ("llama", {"quantization_config": {"quant_method": "bitsandbytes"}}, r"quantization_config"),
        ("llama", {"num_hidden_layers": 3}, r"num_hidden_layers says 3, the tensors 2"),
        ("llama", {"num_key_value_heads": 4}, r"num_key_value_heads 4 x head width 16 = 64, .* 32"),
        ("llama", {"attention_bias": True}, r"a llama config gives qkv_bias True, the tensors False"),
        ("llama", {"model_type": "gemma"}, r"model_type is 'gemma'"),
        ("llama", {"architectures": ["LlamaForSequenceClassification"]}, r"LlamaForSequenceClassification"),
        ("llama-untied", {"tie_word_embeddings": True}, r"lm_head.weight differs from model.embed_t"),
        ("llama", {"num_attention_heads": 0}, r"num_attention_heads is 0 \(a whole number of at least 1\)"),
        ("llama", {"num_key_value_heads": "4"}, r"num_key_value_heads is '4' \(a whole number"),
        ("llama", {"rope_scaling": "yarn"}, r"rope_scaling is 'yarn' \(an object such as"),
        ("llama", {"rope_theta": float("nan"), "rope_parameters": None}, r"rope_theta is nan \(a finite"),
        ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": 0}},
         r"rope_parameters.rope_theta is 0 \(a finite wavelength above 0"),
        ("llama", {"vocab_size": 0}, r"vocab_size is 0 \(a whole number"),
        ("llama", {"vocab_size": 100}, r"vocab_size says 100, the tensors 101"),
    ],
)  # fmt: skip
def test_the_format_refuses_what_zoo_cannot_compute(reference, case, change, message):
    tensors, meta = _files(reference, case)
    with pytest.raises(ForeignLayoutError, match=message):
        from_hf(tensors, {**meta, **change})


def test_a_left_out_head_count_is_transformers_default_and_said_so(reference):
    """Mistral's class defaults to 8 key/value heads (Llama's to the query heads): a config.json
    without the count is read as transformers reads it, and a mismatch says where 8 came from."""
    tensors, meta = _files(reference, "mistral")
    del meta["num_key_value_heads"]
    with pytest.raises(
        ForeignLayoutError, match=r"num_key_value_heads 8 .*left out of config.json: transformers' mis"
    ):
        from_hf(tensors, meta)


def test_the_format_refuses_weights_without_their_config(reference):
    tensors, _ = _files(reference, "llama")
    with pytest.raises(ForeignLayoutError, match=r"without a config.json: .*put transformers' config.json"):
        from_hf(tensors, {})
    untied, meta = _files(reference, "llama-untied")
    del untied["lm_head.weight"]
    with pytest.raises(ForeignLayoutError, match=r"tie_word_embeddings is false but the file has no lm_head"):
        from_hf(untied, meta)


def test_export_refuses_what_the_class_cannot_hold():
    with pytest.raises(ForeignLayoutError, match=r"not a llama layout; set model.model_type to qwen2"):
        hf_config(registry.resolve_config("llama-micro", qkv_bias=True))
    with pytest.raises(ForeignLayoutError, match=r"not a mistral layout; set model.model_type to llama"):
        hf_config(registry.resolve_config("llama-micro", model_type="mistral", mlp_bias=True))
    assert hf_config(registry.resolve_config("qwen2-0.5b"))["architectures"] == ["Qwen2ForCausalLM"]
    with pytest.raises(ForeignLayoutError, match=r"Llama has no sliding_window: set model.model_type to"):
        hf_config(registry.resolve_config("llama-micro", sliding_window=16))
    windowed = hf_config(registry.resolve_config("llama-micro", model_type="mistral", sliding_window=16))
    assert windowed["sliding_window"] == 16
    some = {"sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]}
    with pytest.raises(ForeignLayoutError, match=r"Mistral windows every layer or none; only Qwen2"):
        hf_config(registry.resolve_config("llama-micro", model_type="mistral", **some))
    mixed = hf_config(registry.resolve_config("llama-micro", model_type="qwen2", qkv_bias=True, **some))
    assert mixed["layer_types"] == some["layer_types"] and mixed["use_sliding_window"]
    none = {"sliding_window": 16, "layer_types": ["full_attention"] * 2}  # a window no layer takes
    unwindowed = hf_config(registry.resolve_config("llama-micro", model_type="qwen2", qkv_bias=True, **none))
    assert not unwindowed["use_sliding_window"] and unwindowed["max_window_layers"] == 2


def test_import_reads_a_sharded_directory_with_the_cli(reference, tmp_path):
    """``zoo import`` of the Qwen2 directory: its model.safetensors.index.json and shards."""
    assert (reference / "qwen2" / "model.safetensors.index.json").is_file()
    result = CliRunner().invoke(main, ["import", str(reference / "qwen2"), "--out", str(tmp_path / "q")])
    assert result.exit_code == 0, result.output
    assert read_checkpoint(tmp_path / "q" / "model.safetensors").config.model_type == "qwen2"


@pytest.mark.parametrize(
    "case",
    [
        "llama", "llama-untied", "mistral", "qwen2", "qwen2-backbone", "qwen3", "phi3", "phi3-longrope",
        "mixtral", "qwen3_moe",
    ],
)  # fmt: skip
def test_export_loads_in_transformers(reference, imported, case, tmp_path):
    """``zoo export --format hf`` of the import, changed so that it is not the file it came from:
    transformers' from_pretrained loads every tensor strictly, gives the torch twin's outputs, and
    reads back the config it was imported from; greedy ``generate`` equals ``zoo sample`` in both
    frameworks (with the tokenizer the import brought)."""
    model = zoo.load_checkpoint(imported[case], framework="lightning")
    rng = np.random.default_rng(3)
    load_tensors(
        model, {k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype) for k, v in model_tensors(model).items()}
    )
    checkpoint = zoo.save_checkpoint(model, tmp_path / "zoo" / "model.safetensors")
    tokenizer = imported[case].parent / "tokenizer.json"
    if tokenizer.is_file():
        shutil.copy(tokenizer, checkpoint.parent)
    result = CliRunner().invoke(
        main, ["export", str(checkpoint), "--format", "hf", "--out", str(tmp_path / "hf")]
    )
    assert result.exit_code == 0, result.output
    base = case.removesuffix("-backbone")
    samples = {}
    if tokenizer.is_file():
        for framework in FRAMEWORKS:
            sampled = CliRunner().invoke(
                main, ["sample", str(checkpoint), "--prompt", "the cat sat", "--length", "8", "--json",
                       "--framework", framework],
            )  # fmt: skip
            assert sampled.exit_code == 0, sampled.output
            samples[framework] = json.loads(sampled.stdout)
    prompts = [samples["lightning"]["prompt_ids"]] if samples else []
    out = reference_env.run(
        "hf_llama.py", tmp_path / "ref", "exported", str(tmp_path / "hf"),
        str(reference / f"{base}-inputs.npy"), str(reference / f"{base}-padding.npy"),
        *([json.dumps(prompts)] if prompts else []),
    )  # fmt: skip
    loaded = json.loads((out / "loaded.json").read_text())
    assert (
        loaded["missing_keys"] == [] and loaded["unexpected_keys"] == [] and loaded["mismatched_keys"] == []
    )
    assert loaded["class"] == json.loads((reference / case / "config.json").read_text())["architectures"][0]
    assert loaded["tied"] == (
        read_checkpoint(checkpoint).config.tie_word_embeddings and case != "qwen2-backbone"
    )
    ids, padding = inputs(reference, base)
    expected = run(model, ids, padding)
    assert relative_error(np.load(out / "logits.npy")[~padding], expected[~padding]) <= REFERENCE
    read_back = json.loads((out / "config.json").read_text())
    original = json.loads((reference / f"{base}-config.json").read_text())
    assert {k: read_back.get(k) for k in FAMILY_FIELDS} == {k: original.get(k) for k in FAMILY_FIELDS}
    for framework, sampled in samples.items():
        assert sampled["ids"] == json.loads((out / "generated.json").read_text())[0], framework


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_imported_llama_fine_tunes_with_the_shipped_recipe(imported, framework, tmp_path):
    """The README's tour: ``zoo finetune recipes/llama-finetune-pydocs.yaml --from <import>
    --set model.architecture=llama`` keeps the imported shapes and tokenizer and trains the weights."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 60)
    recipe = Path(__file__).parent.parent / "recipes" / "llama-finetune-pydocs.yaml"
    sets = [
        "model.architecture=llama", f"data.path={text}", "data.seq_len=32", "trainer.max_epochs=1",
        f"export.dir={tmp_path / 'runs'}",
    ]  # fmt: skip
    args = ["finetune", str(recipe), "--from", str(imported["llama"]), "--framework", framework, "--json"]
    result = CliRunner().invoke(main, [*args, *(a for s in sets for a in ("--set", s))])
    assert result.exit_code == 0, result.output
    tuned = read_checkpoint(json.loads(result.stdout)["checkpoint"])
    source = read_checkpoint(imported["llama"])
    assert tuned.config.model_dump(exclude={"preset"}) == source.config.model_dump(exclude={"preset"})
    assert (Path(tuned.path).parent / "tokenizer.json").read_text() == (
        imported["llama"].parent / "tokenizer.json"
    ).read_text()
    before, after = source.tensors(), tuned.tensors()
    assert sorted(before) == sorted(after)
    assert not np.array_equal(
        before["layers.0.self_attn.q_proj.weight"], after["layers.0.self_attn.q_proj.weight"]
    )


def test_compare_passes_on_the_recipe_at_bf16_mixed(tmp_path):
    """``zoo compare`` of llama-micro-pydocs under zoo's one bf16 meaning (docs/precision.md): the
    twins round the same operations, so each section stays within both frameworks' own rounding
    (float32 is test_compare_recipes.py's shipped-recipe case)."""
    from compare_cases import OTHER_STEPS, SECTIONS, TEXT

    from zoo.compare import compare

    recipe = Path(__file__).parent.parent / "recipes" / "llama-micro-pydocs.yaml"
    overrides = [*TEXT, "trainer.precision=bf16-mixed", f"export.dir={tmp_path}"]
    result = compare(recipe, steps=OTHER_STEPS, out=tmp_path / "report", overrides=overrides, speed_steps=0)
    assert result.verdicts == dict.fromkeys(SECTIONS, "PASS"), result.text
    assert json.loads((tmp_path / "report" / "report.json").read_text())["precision"] == "bf16-mixed"


def test_show_prints_the_nested_rope_scaling():
    """``zoo show`` of a preset with a nested section: the section as JSON, in the table and --json."""
    shown = CliRunner().invoke(main, ["show", "llama-3.2-1b", "--json"])
    assert shown.exit_code == 0, shown.output
    fields = {f["name"]: f["value"] for f in json.loads(shown.stdout)["fields"]}
    assert fields["rope_scaling"] == {
        "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }  # fmt: skip
    table = CliRunner().invoke(main, ["show", "llama-3.2-1b"])
    assert table.exit_code == 0 and '"factor": 32.0' in table.output
