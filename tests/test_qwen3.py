"""Qwen3 (dense) is the llama family with ``qk_norm`` (an RMSNorm on each head's query and key
before the rotation) and a head width of its own: transformers' ``Qwen3ForCausalLM``, exactly.

The oracle is ``tests/reference/hf_llama.py``'s ``qwen3`` case (2 layers, width 64, 4 : 2 heads
of 32, tied head, every RMSNorm weight, the query/key norms' included, randomised, saved in shards), the same
fixtures ``tests/test_llama.py`` reads for its logits, generation, import/export and random
configs (Qwen3 is one of its classes there). Here: the logits at 1e-5 and each parameter's
gradient of ``sum(logits * W)`` against transformers' in both twins, and what a Qwen3
``config.json`` or export cannot carry, refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy
import torch
from conftest import perturbed_twins, relative_error
from twin_gradients import keras_pass, largest_gap, torch_pass

import zoo
from architectures.llama.config_json import hf_config
from architectures.llama.formats import from_hf
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.tensors import model_tensors
from zoo.interchange.importing import import_checkpoint
from zoo.nn.keras.precision import build_keras

LOGITS = 1e-5  # relative, max norm, against transformers
# Each gradient against transformers': float32 rounding of sums over the batch, relative to the
# largest gradient of the model (a tensor whose gradient is nearly zero is all rounding).
GRADIENTS = 1e-5
FRAMEWORKS = ("lightning", "keras")


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("hf_llama.py")


@pytest.fixture(scope="module")
def checkpoint(reference, tmp_path_factory) -> Path:
    return import_checkpoint(reference / "qwen3", tmp_path_factory.mktemp("qwen3") / "zoo").path


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_logits_and_gradients_are_transformers(reference, checkpoint, framework):
    """Both twins on the imported Qwen3: transformers' logits within 1e-5 on the real tokens of a
    left- and a right-padded batch, and every parameter's gradient (q_norm and k_norm included)
    at float32 rounding of transformers'."""
    ids, padding = np.load(reference / "qwen3-inputs.npy"), np.load(reference / "qwen3-padding.npy")
    weights = np.load(reference / "qwen3-weights.npy")
    expected = dict(np.load(reference / "qwen3-gradients.npz"))
    model = zoo.load_checkpoint(checkpoint, framework=framework)
    run = torch_pass if framework == "lightning" else keras_pass
    logits, grads = run(model, ids, padding, weights)
    real = ~padding
    assert relative_error(logits[real], np.load(reference / "qwen3-logits.npy")[real]) <= LOGITS
    assert set(grads) == set(expected) and any(".q_norm." in name for name in grads)
    gap, worst = largest_gap(grads, expected)
    assert gap <= GRADIENTS, worst


def _files(reference: Path) -> tuple[dict[str, np.ndarray], dict]:
    folder = reference / "qwen3"  # saved in shards
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        tensors |= safetensors.numpy.load_file(path)
    return tensors, json.loads((folder / "config.json").read_text())


def test_the_import_is_qwen3_with_its_norms_and_head_width(reference):
    fields, tensors = from_hf(*_files(reference))
    assert (fields["model_type"], fields["qk_norm"], fields["head_dim"]) == ("qwen3", True, 32)
    assert tensors["layers.1.self_attn.k_norm.weight"].shape == (32,)


def test_a_left_out_head_dim_is_qwen3s_128(reference):
    """transformers' Qwen3Config has head_dim 128 whatever the width: a file without it is read so,
    and these 32-wide heads then disagree with it, by name."""
    tensors, meta = _files(reference)
    del meta["head_dim"]
    with pytest.raises(ForeignLayoutError, match=r"head width 128"):
        from_hf(tensors, meta)


@pytest.mark.parametrize(
    "change",
    [
        {
            "use_sliding_window": True,
            "sliding_window": 16,
            "layer_types": ["full_attention", "sliding_attention"],
        },
        {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1, "layer_types": None},
    ],
)
def test_a_window_on_some_layers_is_read_as_transformers_reads_it(reference, change):
    """``layer_types``, or where it names none, the layers from ``max_window_layers`` on."""
    tensors, meta = _files(reference)
    fields, _ = from_hf(tensors, {**meta, **change})
    assert (fields["sliding_window"], fields["layer_types"]) == (16, ["full_attention", "sliding_attention"])


@pytest.mark.parametrize(
    "change, words",
    [
        ({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}, "Qwen3NextForCausalLM"),
        ({"model_type": "qwen3_next", "architectures": []}, "'qwen3_next'"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn'"),
    ],
)
def test_what_qwen3_cannot_compute_is_refused_by_name(reference, change, words):
    tensors, meta = _files(reference)
    with pytest.raises(ForeignLayoutError, match=words):
        from_hf(tensors, {**meta, **change})


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"model_type": "llama", "qk_norm": True}, "set model.model_type to qwen3"),
        ({"model_type": "qwen3", "qk_norm": False}, "set qk_norm true"),
        ({"model_type": "qwen3", "qk_norm": True, "mlp_bias": True}, "no transformers class has it"),
    ],
)
def test_export_refuses_what_qwen3_cannot_hold(fields, words):
    config = registry.resolve_config("llama-micro", vocab_size=50, **fields)
    with pytest.raises(ForeignLayoutError, match=words):
        hf_config(config)


def test_the_exported_config_is_qwen3s():
    config = registry.resolve_config("qwen3-0.6b")
    written = hf_config(config)
    assert written["architectures"] == ["Qwen3ForCausalLM"]
    shown = (written["head_dim"], written["attention_bias"], written["use_sliding_window"])
    assert shown == (128, False, False)


def test_the_twins_round_the_query_key_norms_alike_under_bf16_mixed():
    """Under bf16-mixed the norms read the projections' bfloat16 output and round the normalised
    values to bfloat16 before the float32 scale, as transformers' RMSNorm under torch's autocast:
    the Keras twin's norms take their input uncast (a cast to float32 first gave a 1.1e-2 gap)."""
    config, torch_model, _ = perturbed_twins(
        "llama-micro",
        vocab_size=97,
        max_position_embeddings=24,
        model_type="qwen3",
        qk_norm=True,
        head_dim=24,
    )
    keras_model = build_keras(registry.get_family("llama"), config, "bf16-mixed", model_tensors(torch_model))
    ids = np.random.default_rng(0).integers(0, 97, size=(2, 12))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch_model(torch.from_numpy(ids)).float().numpy()
    assert relative_error(np.asarray(keras_model(ids, training=False), np.float32), expected) <= 1e-4
