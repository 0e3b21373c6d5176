"""``zoo import`` of transformers models quantized by compressed-tensors (issue 44): the folders are
written by compressed-tensors itself and read back by transformers' own loader in the reference
environment (tests/reference/ct_quantized.py); zoo keeps the file's integers and scales, both twins
give transformers' logits, and every quantization zoo does not compute exactly is refused by name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import reference_env
import torch
from cli_helpers import zoo_cli
from conftest import eval_output as run
from conftest import relative_error
from safetensors.numpy import load_file, save_file

import zoo
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.quantized import SCALE, Scheme, dequantize, pack, unpack
from zoo.interchange.importing import import_checkpoint

REFERENCE = 1e-5  # relative, max norm: the llama tests' bound against transformers (measured <= 3.5e-7)
GPT2_REFERENCE = 1e-4  # the gpt2 tests' bound (measured 1.3e-6)
FRAMEWORKS = ("lightning", "keras")
CASES = {  # the case, its scheme, and its layers left float by the ignore list
    "llama-int8": (Scheme(scheme="int8"), ["lm_head.weight"]),
    "llama-int8-packed": (Scheme(scheme="int8"), ["lm_head.weight"]),
    "llama-int4": (Scheme(scheme="int4", group_size=16), []),
    "qwen2-tied-int4": (Scheme(scheme="int4", group_size=16), []),
}
FIX = "import the float model, then `zoo quantize CHECKPOINT --scheme int8|int4`"


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("ct_quantized.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imported")
    cases = [*CASES, "llama-int4-bf16", "gpt2-int8"]
    return {case: import_checkpoint(reference / case, root / case).path for case in cases}


def file_integers(folder: Path, bits: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each quantized layer's integers (rows, columns) and scales as compressed-tensors stores
    them, unpacked here bit by bit as its pack_to_int32 documents (element i at bit i * bits)."""
    tensors = load_file(folder / "model.safetensors")
    found = {}
    for key in [k for k in tensors if k.endswith(".weight_scale")]:
        layer = key.removesuffix("_scale")
        if layer + "_packed" in tensors:
            words = tensors[layer + "_packed"].astype(np.int64) & 0xFFFFFFFF
            columns = int(tensors[layer + "_shape"][1])
            at = np.arange(columns) * bits
            values = (words[:, at // 32] >> (at % 32)) & ((1 << bits) - 1)
            integers = values - (1 << (bits - 1))
        else:
            integers = tensors[layer]
        found[layer] = (integers.astype(np.int64), tensors[key].astype(np.float32))
    return found


# ------------------------------------------------------------------------------ the models


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_both_twins_give_transformers_logits_holding_integers(reference, imported, case, framework):
    model = zoo.load_checkpoint(imported[case], framework=framework)
    ids = np.load(reference / f"{case}-inputs.npy")
    expected = np.load(reference / f"{case}-logits.npy")
    assert relative_error(run(model, ids), expected) <= REFERENCE
    if framework == "lightning":
        held = {str(b.dtype) for b in model.buffers()}
    else:
        held = {str(v.dtype) for v in model.weights}
    assert held & {"torch.int8", "torch.uint8", "int8", "uint8"}  # integers in memory, not floats


@pytest.mark.parametrize("case", CASES)
def test_the_checkpoint_holds_the_files_integers_and_scales(reference, imported, case):
    """The file's integers (-128 and -8 among them: compressed-tensors' range) and scales, as they
    are; layers the ignore list left float stay float, and a tied head stays the embedding."""
    scheme, left_float = CASES[case]
    checkpoint = read_checkpoint(imported[case])
    assert checkpoint.quantization == scheme
    stored = load_file(imported[case])
    found = file_integers(reference / case, 8 if scheme.scheme == "int8" else 4)
    assert len(found) == sum(name.endswith(SCALE) for name in stored)
    for layer, (integers, scales) in found.items():
        name = layer.removeprefix("model.")
        held = stored[name] if scheme.scheme == "int8" else unpack(stored[name], integers.shape[1])
        assert held.dtype == np.int8 and np.array_equal(held, integers), layer
        assert stored[name + SCALE].dtype == np.float32 and np.array_equal(stored[name + SCALE], scales)
    low = -128 if scheme.scheme == "int8" else -8
    assert min(int(integers.min()) for integers, _ in found.values()) == low
    for name in left_float:
        assert stored[name].dtype == np.float32 and name + SCALE not in stored
    config = checkpoint.config
    assert config.tie_word_embeddings == (case == "qwen2-tied-int4")
    assert "lm_head.weight" in stored or config.tie_word_embeddings


def test_bfloat16_scales_are_kept_and_transformers_rounds_the_product(reference, imported):
    """bfloat16 scales become float32 exactly; transformers' weight is zoo's float32 product
    rounded to bfloat16, bit for bit."""
    stored = load_file(imported["llama-int4-bf16"])
    for layer, (_, scales) in file_integers(reference / "llama-int4-bf16", 4).items():
        name = layer.removeprefix("model.")
        assert np.array_equal(stored[name + SCALE], scales)
    weights = read_checkpoint(imported["llama-int4-bf16"]).tensors()
    loaded = np.load(reference / "llama-int4-bf16-weights.npz")
    compared = [key for key in loaded.files if key.removeprefix("model.") in weights]
    for key in compared:  # transformers' state dict holds the scales too, under their own names
        ours = weights[key.removeprefix("model.")].astype(ml_dtypes.bfloat16).astype(np.float32)
        assert np.array_equal(ours, loaded[key]), key
    assert len(compared) == len(weights)


def test_gpt2s_conv1d_layers_are_not_quantized_so_it_imports_float(reference, imported):
    """compressed-tensors quantizes Linear layers: gpt2's projections are Conv1D, and with lm_head
    ignored it quantizes nothing and writes no quantization_config."""
    assert "quantization_config" not in json.loads((reference / "gpt2-int8" / "config.json").read_text())
    assert read_checkpoint(imported["gpt2-int8"]).quantization is None
    ids = np.load(reference / "gpt2-int8-inputs.npy")
    expected = np.load(reference / "gpt2-int8-logits.npy")
    for framework in FRAMEWORKS:
        got = run(zoo.load_checkpoint(imported["gpt2-int8"], framework=framework), ids)
        assert relative_error(got, expected) <= GPT2_REFERENCE


def test_zoo_import_says_what_it_holds_as_integers(reference, tmp_path):
    code, out = zoo_cli("import", reference / "llama-int4", "--out", tmp_path / "json", "--json")
    said = json.loads(out)
    stored = load_file(tmp_path / "json" / "model.safetensors")
    assert code == 0 and said["quantization"] == Scheme(scheme="int4", group_size=16).describe()
    assert said["quantized"] == sum(name.endswith(SCALE) for name in stored) > 0
    assert said["left_float"] == [] and said["tensors"] == len(stored) - said["quantized"]
    code, out = zoo_cli("import", reference / "llama-int8", "--out", tmp_path / "text")
    assert code == 0 and f"held as {Scheme(scheme='int8').describe()}" in out


def test_the_twins_unpack_compressed_tensors_extremes():
    """-8 and -128, outside zoo's own quantizer's range, in numpy's and both twins' unpacking."""
    from zoo.nn.keras.quantized import unpack as keras_unpack
    from zoo.nn.torch.quantized import unpack as torch_unpack

    integers = np.tile(np.arange(-8, 8, dtype=np.int8), (3, 1))[:, :15]  # an odd column count too
    packed = pack(integers)
    assert np.array_equal(unpack(packed, 15), integers)
    assert np.array_equal(torch_unpack(torch.from_numpy(packed), 15).numpy(), integers)
    assert np.array_equal(np.asarray(keras_unpack(packed, 15)), integers)
    int8 = np.array([[-128, 127], [-1, 0]], np.int8)
    scale = np.array([[0.5], [2.0]], np.float32)
    assert dequantize(int8, scale, (2, 2), Scheme(scheme="int8")).tolist() == [[-64, 63.5], [-2, 0]]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("llama-int4-asym", "config_groups.group_0.weights.symmetric false (a zero point per scale"),
        ("llama-w8a8", "config_groups.group_0.input_activations (activations quantized as well"),
        ("qwen2-tied-head", "lm_head is quantized while config.json ties it to the token embedding"),
    ],
)
def test_compressed_tensors_schemes_zoo_does_not_compute_are_refused(reference, case, message, tmp_path):
    code, out = zoo_cli("import", reference / case, "--out", tmp_path / "out")
    assert code == 2 and message in " ".join(out.split()) and not (tmp_path / "out").exists()


WEIGHTS = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 16, "symmetric": True}


def ct_config(weights: dict | None = None, **fields) -> dict:
    group = {"targets": ["Linear"], "weights": {**WEIGHTS, **(weights or {})}}
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"g": group},
    } | fields


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "quant_method 'gptq'"),
        ({"quant_method": "awq", "bits": 4}, "quant_method 'awq'"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
         "quant_method 'bitsandbytes' (load_in_4bit, nf4)"),
        ({"quant_method": "torchao", "quant_type": "int8_weight_only"}, "quant_method 'torchao'"),
        ({"quant_method": "hqq"}, "quant_method 'hqq'"),
        ({"bits": 4}, "quant_method 'unnamed'"),
        (ct_config({"type": "float", "num_bits": 8, "strategy": "channel", "group_size": None}),
         "weights.type 'float'"),
        (ct_config({"strategy": "channel", "group_size": None}), "num_bits 4 with strategy 'channel'"),
        (ct_config({"group_size": 15}), "group_size 15"),
        (ct_config({"num_bits": 8, "strategy": "group"}), "num_bits 8 with strategy 'group'"),
        (ct_config({"num_bits": 3}), "num_bits 3 (zoo holds int8 and int4)"),
        (ct_config({"actorder": "group"}), "actorder 'group'"),
        (ct_config(format="float-quantized"), "format 'float-quantized'"),
        (ct_config(kv_cache_scheme={"num_bits": 8, "type": "float"}), "kv_cache_scheme (a quantized"),
        (ct_config(transform_config={"config_groups": {"r": {}}}), "transform_config"),
        (ct_config(quantization_status="frozen"), "quantization_status 'frozen'"),
        (ct_config() | {"config_groups": {"a": ct_config()["config_groups"]["g"],
                                   "b": {"weights": {"num_bits": 8, "strategy": "channel"}}}},
         "config_groups with different schemes (a: int4, groups of 16, b: int8"),
    ],
)  # fmt: skip
def test_other_quantizations_are_refused_by_name_before_the_weights(reference, config, said, tmp_path):
    """Named with the unsupported field, what zoo reads, and the float-model route; nothing written."""
    src = tmp_path / "quantized"
    shutil.copytree(reference / "llama-int4", src)
    meta = json.loads((src / "config.json").read_text()) | {"quantization_config": config}
    (src / "config.json").write_text(json.dumps(meta))
    save_file({"not.weights": np.zeros(4, np.float32)}, src / "model.safetensors")
    code, out = zoo_cli("import", src, "--out", tmp_path / "out")
    out = " ".join(out.split())
    assert code == 2 and said in out and FIX in out, out
    assert "a quantized model (quantization_config:" in out and not (tmp_path / "out").exists()


def test_the_memory_check_counts_the_integers_made_float32(reference, tmp_path, monkeypatch):
    """A quantized folder's weights become float32 as they are read (int4: eight times their
    bytes): an import the file's size alone would let through is refused, nothing written."""
    from zoo.peak_memory import MemoryShort

    size = (reference / "llama-int4" / "model.safetensors").stat().st_size
    monkeypatch.setenv("ZOO_AVAILABLE_MEMORY", str(5 * size))  # over the 3 file sizes a float import holds
    with pytest.raises(MemoryShort, match="zoo import needs about"):
        import_checkpoint(reference / "llama-int4", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("ZOO_AVAILABLE_MEMORY", str(11 * size))  # file, float32 weights, checkpoint
    assert import_checkpoint(reference / "llama-int4", tmp_path / "out").path.is_file()
