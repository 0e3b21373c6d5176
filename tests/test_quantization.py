"""Weight-only quantization (zoo.checkpoint.quantized, ``zoo quantize``): the quantizer's
arithmetic on Hypothesis-drawn weights, against torch's own rounding; a quantized checkpoint
loaded by both twins (the same float32 weights, bit for bit, through both fast load paths);
the commands that take a checkpoint taking a quantized one, with the same answers in both
frameworks; LoRA over a quantized base (QLoRA) through ``zoo compare``; refusals in one line.
The registry-wide check (every entry quantized, both twins' outputs) is test_registry's."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cli_helpers import zoo_cli
from conftest import FRAMEWORKS, SHORT_TEXT, tiny_lm_recipe
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import zoo
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.quantized import LEVELS, SCALE, Scheme, dequantize, pack, quantize, unpack
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.interchange import InterchangeError

SCHEMES = [Scheme.of("int8"), Scheme.of("int4"), Scheme.of("int4", 6), Scheme.of("int4", 128)]
# Quantized against float on the trained model below (a 1-layer gpt2-micro, test loss 0.609): the
# loss moved by 1.9e-4 at int8 and 7.7e-3 at int4 (groups of 32); the bounds leave 5x of that.
LOSS_MOVES = {"int8": 1e-3, "int4": 0.04}


def weights():
    """Matrices and kernels of 2 to 4 dimensions, rows and groups ragged, values of any sign."""
    finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)
    shapes = hnp.array_shapes(min_dims=2, max_dims=4, min_side=2, max_side=9)
    return hnp.arrays(np.float32, shapes, elements=finite)


@settings(max_examples=60, deadline=None)
@given(weight=weights(), scheme=st.sampled_from(SCHEMES))
@example(weight=np.full((2, 2), 3.66e-43, np.float32), scheme=SCHEMES[0])  # a subnormal scale
def test_each_weight_is_within_half_a_step_of_its_integer_times_its_scale(weight, scheme):
    integers, scale = quantize(weight, scheme)
    stored_integers, stored_scales = scheme.stored_shapes(weight.shape)
    assert integers.shape == stored_integers and scale.shape == stored_scales and scale.dtype == np.float32
    back = dequantize(integers, scale, weight.shape, scheme)
    assert back.shape == weight.shape and back.dtype == np.float32
    rows = weight.reshape(weight.shape[0], -1)
    size = scheme.group_size or rows.shape[1]
    step = np.repeat(scale, size, axis=1)[:, : rows.shape[1]].reshape(weight.shape)
    # half a step, and float32's rounding of the quotient and of the product; a subnormal scale
    # is rounded to 2**-149 absolute, which the largest integer multiplies (Hypothesis found
    # weights of 3.66e-43 whose scale 2.9e-45 rounds to 2.8e-45: 1e-44 off, half a step is 1.4e-45)
    subnormal = LEVELS[scheme.scheme] * np.float32(2**-149)
    assert np.all(np.abs(back - weight) <= step * (0.5 + 1e-5) + 1e-6 * np.abs(weight) + subnormal)
    # every group's largest weight is its scale's whole range: nothing is clipped
    peak = np.abs(rows).max(axis=1)
    assert np.all(np.abs(back).reshape(len(rows), -1).max(axis=1) <= peak * (1 + 1e-6) + 1e-30)


@settings(max_examples=40, deadline=None)
@given(weight=weights(), scheme=st.sampled_from(SCHEMES))
def test_the_integers_are_torchs_rounding_of_the_weight_over_the_scale(weight, scheme):
    """Torch, written independently: round half to even of w / scale, clamped to the levels."""
    import torch

    integers, scale = quantize(weight, scheme)
    rows = torch.from_numpy(weight.reshape(weight.shape[0], -1))
    size = scheme.group_size or rows.shape[1]
    groups = -(-rows.shape[1] // size)
    padded = torch.nn.functional.pad(rows, (0, groups * size - rows.shape[1])).reshape(
        len(rows), groups, size
    )
    levels = LEVELS[scheme.scheme]
    peak = padded.abs().amax(dim=2)
    expected_scale = peak / levels
    expected_scale = torch.where(expected_scale > 0, expected_scale, torch.ones_like(peak))
    expected = torch.round(padded / expected_scale[..., None]).clamp(-levels, levels).reshape(len(rows), -1)
    expected = expected[:, : rows.shape[1]].to(torch.int8).numpy()
    got = integers.reshape(len(rows), -1) if scheme.scheme == "int8" else unpack(integers, rows.shape[1])
    assert np.array_equal(scale, expected_scale.numpy())
    assert np.array_equal(got, expected)


@given(hnp.arrays(np.int8, hnp.array_shapes(min_dims=2, max_dims=2, max_side=9), elements=st.integers(-8, 7)))
def test_int4_packs_two_integers_a_byte_and_unpacks_them(integers):
    packed = pack(integers)
    assert packed.dtype == np.uint8 and packed.shape == (integers.shape[0], (integers.shape[1] + 1) // 2)
    assert np.array_equal(unpack(packed, integers.shape[1]), integers)


def test_a_row_of_zeros_stays_zeros_and_bfloat16_weights_quantize_as_float32():
    weight = np.zeros((4, 40), np.float32)
    weight[1] = np.linspace(-2, 2, 40)
    weight[3] = np.float32(1.4e-45)  # the least subnormal: its scale would underflow to 0
    for scheme in SCHEMES:
        integers, scale = quantize(weight, scheme)
        back = dequantize(integers, scale, weight.shape, scheme)
        assert not back[0].any() and not back[2].any() and not back[3].any() and np.all(scale[0] == 1)
        low = weight.astype(ml_dtypes.bfloat16)
        pairs = zip(quantize(low, scheme), quantize(low.astype(np.float32), scheme), strict=True)
        assert all(np.array_equal(a, b) for a, b in pairs)


def test_schemes_are_refused_with_what_would_work():
    with pytest.raises(ValueError, match="int8 has one scale per output channel"):
        Scheme(scheme="int8", group_size=32)
    with pytest.raises(ValueError, match="even group_size"):
        Scheme.of("int4", 7)


# ------------------------------------------------------------------ quantized checkpoints


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A one-epoch, one-layer gpt2-micro on a short text: a checkpoint with a tokenizer and a
    recipe, whose loss quantization moves."""
    folder = tmp_path_factory.mktemp("quantized")
    recipe = tiny_lm_recipe(folder, "q", trainer={"max_epochs": 2})
    return zoo.train(recipe, "lightning").checkpoint


@pytest.fixture(scope="module")
def quantized(trained, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("q")
    return {s: zoo.quantize_checkpoint(trained, folder / s, s).path for s in ("int8", "int4")}


@pytest.mark.parametrize("scheme", ["int8", "int4"])
def test_both_fast_loads_give_the_dequantized_weights_bit_for_bit(quantized, scheme):
    checkpoint = read_checkpoint(quantized[scheme])
    expected = checkpoint.float32_tensors()
    stored = load_file(quantized[scheme])
    assert stored["h.0.mlp.fc1.weight"].dtype == (np.int8 if scheme == "int8" else np.uint8)
    assert "h.0.mlp.fc1.weight" + SCALE in stored and "h.0.ln_1.weight" + SCALE not in stored
    for framework in FRAMEWORKS:
        loaded = model_tensors(zoo.load_checkpoint(quantized[scheme], framework=framework))
        assert loaded.keys() == expected.keys()
        for name, value in expected.items():
            assert np.array_equal(loaded[name], value), (framework, name)


@pytest.mark.parametrize(
    ("scheme", "precision"), [("int8", "bf16-mixed"), ("int4", "bf16-mixed"), ("int4", "bf16-true")]
)
def test_twins_hold_the_integers_and_compute_the_float_weights_numbers_in_bfloat16_too(
    quantized, scheme, precision
):
    """A loaded quantized twin keeps 1 (int8) or 1/2 (int4) byte a weight for its matrices and
    makes each float32 weight when a layer reads it: in bfloat16 (bf16-mixed: torch's autocast,
    Keras' mixed policy; bf16-true: the twin cast to bfloat16, a bfloat16 Keras policy) its
    logits are those of the same twin holding the dequantized float32 weights, to the bit."""
    import torch

    from zoo.nn.keras import quantized as keras_quantized
    from zoo.nn.keras.precision import build_keras
    from zoo.nn.torch import quantized as torch_quantized

    checkpoint = read_checkpoint(quantized[scheme])
    family, config, weights = checkpoint.family, checkpoint.config, checkpoint.float32_tensors()
    ids = torch.from_numpy(config.example_input(3, seed=1))
    held = zoo.load_checkpoint(quantized[scheme], framework="lightning").eval()
    plain = family.build_torch(config).eval()
    load_tensors(plain, weights)
    float_bytes = torch_quantized.held_bytes(plain)
    assert torch_quantized.held_bytes(held) < float_bytes * (0.4 if scheme == "int8" else 0.3)
    mixed = precision == "bf16-mixed"
    if not mixed:
        held, plain = held.to(torch.bfloat16), plain.to(torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=mixed):
        assert torch.equal(held(ids), plain(ids))
    held, plain = (build_keras(family, config, precision, weights) for _ in range(2))
    table = family.weight_table(config)
    assert keras_quantized.hold_integers(held, table, checkpoint.stored_integers(), checkpoint.quantization)
    assert keras_quantized.held_bytes(held) < keras_quantized.held_bytes(plain) * 0.4
    assert np.array_equal(np.asarray(held(ids.numpy())), np.asarray(plain(ids.numpy())))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_qlora_holds_the_frozen_base_as_integers_with_the_float_bases_gradients(quantized, framework):
    """QLoRA's twin (zoo.lora.hold_quantized_base, as the step kits call it): every base matrix
    held as the checkpoint's integers, the adapters' gradients those over the dequantized float
    base to the bit."""
    from zoo.finetune import InitPlan
    from zoo.lora import Adapter, attach, hold_quantized_base
    from zoo.nn.keras.precision import build_keras
    from zoo.recipe.fine_tuning import LoraConfig

    checkpoint = read_checkpoint(quantized["int4"])
    family, config, weights = checkpoint.family, checkpoint.config, checkpoint.float32_tensors()
    lora = Adapter.from_recipe(family, config, LoraConfig(rank=4, alpha=8))
    ids = config.example_input(3, seed=1)
    gradients = []
    for hold in (False, True):
        if framework == "keras":
            model = build_keras(family, config, "32-true", weights)
        else:
            model = family.build_torch(config)
            load_tensors(model, weights)
        attach(model, family, config, lora, seed=0)
        if hold:
            held = hold_quantized_base(model, InitPlan(source=quantized["int4"], tensors={}))
            assert len(held) == sum(name.endswith(SCALE) for name in load_file(quantized["int4"]))
        gradients.append(_lora_gradients(model, ids))
    assert gradients[0].keys() == gradients[1].keys() and gradients[0]
    for name, value in gradients[0].items():
        assert np.array_equal(value, gradients[1][name]), name


def _lora_gradients(model, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Each trainable tensor's gradient of the logits' sum of squares."""
    import torch

    if isinstance(model, torch.nn.Module):
        (model.eval()(torch.from_numpy(ids)) ** 2).sum().backward()
        return {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.requires_grad}
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(ids, training=False) ** 2)
    trainable = model.trainable_variables
    return {v.path: g.numpy() for v, g in zip(trainable, tape.gradient(loss, trainable), strict=True)}


def test_evaluate_and_sample_give_the_same_answers_in_both_frameworks(trained, quantized):
    recipe = trained.parent / "recipe.yaml"

    def answers(path: Path, framework: str) -> tuple[float, list[int]]:
        code, out = zoo_cli("evaluate", path, "--recipe", recipe, "--framework", framework, "--json")
        assert code == 0, out
        loss = json.loads(out)["test_loss"]
        code, out = zoo_cli(
            "sample", path, "--prompt", "the ", "--length", "10", "--framework", framework, "--json"
        )
        assert code == 0, out
        return loss, json.loads(out)["ids"]

    float_loss, _ = answers(trained, "lightning")
    for scheme, path in quantized.items():
        (torch_loss, torch_ids), (keras_loss, keras_ids) = (answers(path, fw) for fw in FRAMEWORKS)
        assert torch_ids == keras_ids, scheme
        assert abs(torch_loss - keras_loss) <= 1e-5 * abs(torch_loss), scheme
        assert 0 < abs(torch_loss - float_loss) <= LOSS_MOVES[scheme], scheme


@pytest.mark.parametrize(("format", "framework"), [("onnx", "lightning"), ("savedmodel", "keras")])
def test_an_int4_checkpoint_exports_with_its_integers(quantized, format, framework, tmp_path):
    """zoo export of a quantized checkpoint: the held twin (its integers, and the arithmetic that
    makes the weights, which the exporter may fold) exports, and the artifact gives its outputs.
    torch's ONNX exporter once refused the int4 unpacking's bit operations."""
    from zoo.deploy import export_model

    out = tmp_path / ("model.onnx" if format == "onnx" else "saved")
    report = export_model(quantized["int4"], format, out, framework=framework)
    assert report.checks and all(check.max_diff <= check.tolerance for check in report.checks)


def test_the_command_says_what_it_wrote_and_inspect_shows_the_scheme(trained, tmp_path):
    code, out = zoo_cli(
        "quantize", trained, "--scheme", "int4", "--group-size", "16", "--out", tmp_path, "--json"
    )
    assert code == 0, out
    done = json.loads(out)
    assert done["scheme"] == {"scheme": "int4", "group_size": 16} and done["bytes"] < done["float_bytes"] / 4
    assert (tmp_path / "tokenizer.json").is_file()
    code, out = zoo_cli("inspect", done["path"], "--json")
    info = json.loads(out)
    assert info["metadata"]["quantization"] == {"scheme": "int4", "group_size": 16}
    dtypes = {name: dtype for name, _, dtype in info["tensors"]}
    assert dtypes["h.0.attn.in_proj_weight"] == "int4" and dtypes["h.0.attn.in_proj_bias"] == "float32"
    code, out = zoo_cli("inspect", done["path"])
    assert 'quantization: {"scheme": "int4", "group_size": 16}' in out


def test_lora_over_a_quantized_base_trains_alike_in_both_frameworks(quantized, tmp_path):
    """QLoRA: the adapters train over the frozen dequantized base, the same in both twins."""
    from compare_cases import SECTIONS

    from zoo.compare import compare

    text = tmp_path / "text.txt"
    text.write_text(SHORT_TEXT)
    recipe = Path(__file__).parent.parent / "recipes" / "gpt2-micro-lora-pydocs.yaml"
    overrides = [f"init.from={quantized['int4']}", "model.n_layer=1", "data.seq_len=16", "data.batch_size=8",
                 f"data.path={text}", f"export.dir={tmp_path}"]  # fmt: skip
    result = compare(recipe, steps=4, out=tmp_path / "report", overrides=overrides, speed_steps=0)
    assert result.verdicts == dict.fromkeys(SECTIONS, "PASS"), result.text


def test_a_qlora_adapter_loads_in_peft_over_the_dequantized_base(quantized, tmp_path):
    """An adapter on an int4 base, exported for PEFT, on the base exported for transformers (its
    dequantized weights): PEFT's logits are both twins'; merged by zoo (a float checkpoint), PEFT's
    merge_and_unload's."""
    import reference_env

    from zoo.interchange.exporting import export_checkpoint
    from zoo.lora import Adapter, base_digest, initial_tensors, load_adapter, write_adapter
    from zoo.recipe.fine_tuning import LoraConfig

    checkpoint = read_checkpoint(quantized["int4"])
    adapter = Adapter.from_recipe(checkpoint.family, checkpoint.config, LoraConfig(rank=4, alpha=8))
    rng = np.random.default_rng(0)  # B away from zero, else every check passes trivially
    lora = {
        name: rng.normal(0, 0.1, value.shape).astype(np.float32) if name.endswith("lora_B") else value
        for name, value in initial_tensors(adapter, 0).items()
    }
    base = {"path": str(quantized["int4"]), "sha256": base_digest(checkpoint.float32_tensors())}
    path = write_adapter(
        tmp_path / "adapter.safetensors", checkpoint.family, checkpoint.config, adapter, lora, base,
        framework="lightning",
    )  # fmt: skip
    export_checkpoint(quantized["int4"], "hf", tmp_path / "hf")
    code, out = zoo_cli("export", path, "--format", "peft", "--out", tmp_path / "peft")
    assert code == 0, out
    ids = checkpoint.config.example_input(3, seed=1)
    np.save(tmp_path / "ids.npy", ids)
    ref = reference_env.run(
        "peft_lora.py",
        tmp_path / "ref",
        str(tmp_path / "hf"),
        str(tmp_path / "ids.npy"),
        str(tmp_path / "peft"),
    )
    expected = np.load(ref / "exported-logits.npy")
    for framework in FRAMEWORKS:
        model = load_adapter(path, framework)
        got = np.asarray(model(ids)) if framework == "keras" else _torch_logits(model, ids)
        assert np.abs(got - expected).max() <= 2e-5, framework  # test_lora's PEFT bound
    code, out = zoo_cli("merge", path, "--out", tmp_path / "merged")
    assert code == 0, out
    merged = read_checkpoint(tmp_path / "merged" / "model.safetensors")
    assert merged.quantization is None
    merged_logits = _torch_logits(zoo.load_checkpoint(merged.path, framework="lightning"), ids)
    assert np.abs(merged_logits - np.load(ref / "exported-merged-logits.npy")).max() <= 2e-5
    # an adapter goes wherever a model goes: zoo quantize takes it merged onto its base
    code, out = zoo_cli("quantize", path, "--out", tmp_path / "adapter-int8.safetensors")
    assert code == 0, out
    of_merged = zoo.quantize_checkpoint(merged.path, tmp_path / "merged-int8.safetensors").path
    got, expected = load_file(tmp_path / "adapter-int8.safetensors"), load_file(of_merged)
    assert got.keys() == expected.keys() and all(np.array_equal(got[k], expected[k]) for k in got)


def _torch_logits(model, ids: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model.eval()(torch.from_numpy(ids)).numpy()


# ---------------------------------------------------------------------------- refusals


def test_refusals_name_what_would_work(trained, quantized, tmp_path):
    with pytest.raises(InterchangeError, match=r"already quantized \(int8\); quantize the float checkpoint"):
        zoo.quantize_checkpoint(quantized["int8"], tmp_path / "again.safetensors")
    with pytest.raises(InterchangeError, match="is an input of this command"):
        zoo.quantize_checkpoint(trained, trained, overwrite=True)
    with pytest.raises(InterchangeError, match="already exists; choose another --out or pass --overwrite"):
        zoo.quantize_checkpoint(trained, quantized["int8"])
    code, out = zoo_cli("quantize", trained, "--scheme", "int4", "--group-size", "7", "--out", tmp_path / "x")
    assert code == 2 and "int4 needs an even group_size" in out and not (tmp_path / "x").exists()
    code, out = zoo_cli("quantize", trained, "--group-size", "32", "--out", tmp_path / "x")
    assert code == 2 and "int8 has one scale per output channel" in out


def test_damaged_integers_or_scales_are_refused_naming_the_tensor(quantized, tmp_path):
    tensors = load_file(quantized["int4"])
    with safe_open(str(quantized["int4"]), framework="np") as handle:
        metadata = handle.metadata()
    name = "h.0.mlp.fc1.weight"
    wrong_scales = {**tensors, name + SCALE: tensors[name + SCALE][:, :1].copy()}
    save_file(wrong_scales, tmp_path / "scales.safetensors", metadata)
    with pytest.raises(
        CheckpointError, match=rf"{name}'s scales are float32 \[256, 1\], not float32 \[256, 2\]"
    ):
        read_checkpoint(tmp_path / "scales.safetensors")
    save_file(tensors, tmp_path / "scheme.safetensors", {**metadata, "quantization": '{"scheme": "int3"}'})
    with pytest.raises(CheckpointError, match="is not a scheme zoo reads"):
        read_checkpoint(tmp_path / "scheme.safetensors")


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
            "quant_method 'bitsandbytes' (load_in_4bit)",
        ),
        ({"quant_method": "gptq", "bits": 4}, "quant_method 'gptq'"),
        ({"quant_method": "awq"}, "quant_method 'awq'"),
        ({"quant_method": "compressed-tensors"}, "quant_method 'compressed-tensors'"),
    ],
)
def test_a_transformers_model_saved_quantized_is_refused_naming_its_method(config, said, tmp_path):
    """Before its weights are read, whatever the family: the float model imports, then zoo quantize."""
    src = tmp_path / "quantized-gpt2"
    src.mkdir()
    meta = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "quantization_config": config}
    (src / "config.json").write_text(json.dumps(meta))
    save_file({"transformer.wte.weight": np.zeros((4, 2), np.int8)}, src / "model.safetensors")
    code, out = zoo_cli("import", src, "--out", tmp_path / "out")
    assert code == 2 and f"a quantized model (quantization_config: {said})" in out
    assert "then `zoo quantize CHECKPOINT --scheme int8|int4`" in out and not (tmp_path / "out").exists()


def test_the_bench_measures_both_schemes_in_both_twins(tmp_path):
    """bench/quantization.py's preset rows on a small preset: the file's cut and the loaded twins'
    (both hold the integers), their loads and passes, and their equal gaps to float32; the
    libraries' own int8 beside them where installed (torchao is a bench extra)."""
    from bench_scripts import load_bench_script

    rows = load_bench_script("quantization").preset_rows("gpt2-micro", tmp_path, repeats=1)
    cells = {row.split(" | ")[1]: row.strip("| ").split(" | ")[2:] for row in rows}
    assert list(cells)[:3] == ["float32", "int8", "int4"]
    for scheme, (low, high) in {"int8": (3.5, 4), "int4": (6, 8)}.items():  # about 4x and 7x below float32
        file, _, held, _, _, gap = cells[scheme]
        ratios = [float(part.split("(")[1].split("x)")[0]) for part in [file, *held.split(" / ")]]
        assert all(low < ratio < high for ratio in ratios), (scheme, ratios)
        torch_gap, keras_gap = gap.split(" / ")
        assert torch_gap == keras_gap and float(torch_gap) > 0
    keras_own = cells["int8, Keras' quantize"][-1].split(" / ")[1]
    assert 0 < float(keras_own) < 0.05  # Keras' int8 Dense, its inputs quantized too
