"""The convnext family is torchvision's and timm's ConvNeXt: same weights in, same outputs out, in
both frameworks; and it fine-tunes from their files.

The oracle is ``tests/reference/torchvision_convnext.py``, run once in the reference environment:
torchvision's ConvNeXt at micro shape (depths [1, 1, 2, 1], widths [16, 32, 64, 128]) and its
``convnext_tiny``, timm's ``convnext_tiny``, a 1-channel 1x1-patch micro one and a headless
(``num_classes=0``) micro one, seeded, with every tensor randomised (the layer scale at 0.5..1.5:
at its initial 1e-6 every block would hide behind its shortcut), written the library's way
(``torch.save``; timm's ``save_for_hf``), with their outputs on a batch of 2. Those files go
through ``zoo import`` (:func:`zoo.interchange.importing.import_checkpoint`) into zoo checkpoints that each
twin loads.

Tolerance: relative error in the max norm, ``max |zoo - reference| / max |reference|`` over the
whole output, at most 1e-4, in eval mode and in train mode (stochastic depth 0). Measured (torch
2.13, TF 2.21, CPU): the torch twin is bit-identical to both libraries (0.0) on every case; the
Keras twin within 4.3e-7 (timm micro, 1 channel) to 1.5e-6 (torchvision convnext_tiny).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import reference_env
import torch
from conftest import FRAMEWORKS, RECIPE, forward_keras, forward_torch, relative_error, twins

import zoo
from architectures.convnext.formats import torchvision_names
from zoo import registry
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint
from zoo.keras.data import keras_layout
from zoo.nn.errors import InputError

REFERENCE = 1e-4  # relative, max norm: zoo's twins against torchvision / timm
TWINS = 1e-5  # relative, max norm: zoo's torch twin against its Keras twin (float32)
FAMILY = registry.get_family("convnext")
MICRO = {"depths": [1, 1, 2, 1], "dims": [16, 32, 64, 128]}  # as tests/reference/torchvision_convnext.py
# (case, library, what the reference wrote, the task it reads as)
CASES = [
    ("torchvision-micro", "torchvision", "torchvision-micro.pth", "classification"),
    ("torchvision-tiny", "torchvision", "torchvision-tiny.pth", "classification"),
    ("timm-tiny", "timm", "timm-tiny", "classification"),
    ("timm-micro-gray", "timm", "timm-micro-gray", "classification"),
    ("timm-micro-features", "timm", "timm-micro-features", "features"),
]
DIGITS32 = Path(__file__).parent.parent / "recipes" / "convnext-micro-digits32.yaml"


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("torchvision_convnext.py")


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[str, Path]:
    """Every case through ``zoo import`` (no format named: each is recognised by its keys)."""
    root = tmp_path_factory.mktemp("imported")
    found = {}
    for case, library, source, task in CASES:
        result = import_checkpoint(reference / source, root / case)
        assert (result.family.name, result.format.name, result.config.task) == ("convnext", library, task)
        found[case] = result.path
    return found


def randomised(tensors: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Every tensor moved by noise at its own scale (layer scale and norm parameters included)."""
    rng = np.random.default_rng(seed)
    return {
        k: (v + rng.normal(size=v.shape) * max(float(np.abs(v).max()), 0.5)).astype(v.dtype)
        for k, v in tensors.items()
    }


# ------------------------------------------------------------------------- against the reference


def test_parameter_counts_are_torchvisions_and_timms(reference):
    counts = json.loads((reference / "counts.json").read_text())
    listed = {entry.name: entry.parameters for entry in registry.list_architectures()}
    for size, expected in counts["torchvision"].items():
        assert listed[f"convnext-{size}"] == expected == counts["timm"][size], size
    assert listed["convnext"] == counts["torchvision"]["tiny"]  # the family's defaults are convnext_tiny


def test_torch_twin_initialises_bit_for_bit_as_timm(reference):
    expected = json.loads((reference / "init.json").read_text())["timm"]
    torch.manual_seed(0)
    model = FAMILY.build_torch(registry.resolve_config("convnext", num_classes=10, **MICRO))
    state = model.state_dict()
    assert list(state) == list(expected)
    got = {k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in state.items()}
    assert [k for k in got if got[k] != expected[k]] == []


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_imported_weights_give_the_reference_outputs(reference, imported, case, framework, training):
    x = np.load(reference / f"{case}-inputs.npy")
    expected = np.load(reference / f"{case}-{'train' if training else 'eval'}.npy")
    model = zoo.load_checkpoint(imported[case], framework=framework)
    if framework == "lightning":
        got = forward_torch(model, x, training)
    else:
        got = forward_keras(model, x, FAMILY, training)
    assert got.shape == expected.shape
    assert relative_error(got, expected) <= REFERENCE


@pytest.mark.parametrize("source", ["torchvision-micro.pth", "timm-micro-gray", "timm-micro-features"])
def test_import_then_export_is_bit_identical(reference, tmp_path, source):
    library = "torchvision" if source.endswith(".pth") else "timm"
    imported = import_checkpoint(reference / source, tmp_path / "imported")
    target = tmp_path / ("exported.pth" if library == "torchvision" else "exported")
    export_checkpoint(imported.path, library, target)
    original, meta = read_foreign(reference / source)
    exported, exported_meta = read_foreign(target)
    assert list(exported) == list(original) if library == "torchvision" else set(exported) == set(original)
    changed = [
        k
        for k, v in original.items()
        if exported[k].dtype != v.dtype
        or exported[k].shape != v.shape
        or exported[k].tobytes() != v.tobytes()
    ]
    assert changed == []
    if library == "timm":  # timm's own config.json and zoo's describe the same model
        for key in ("architecture", "num_classes", "num_features", "global_pool", "model_args"):
            assert exported_meta[key] == meta[key], key


def run_reference(out: Path, *args: str) -> Path:
    return reference_env.run("torchvision_convnext.py", out, *args)


def test_torchvision_loads_the_export_strictly_and_bit_for_bit(tmp_path):
    """A zoo ConvNeXt of a shape torchvision has no factory for, every tensor randomised, exported
    as .pth and .safetensors: torchvision's ``ConvNeXt`` takes every tensor as written
    (``load_state_dict(strict=True)``, then its state dict equals the file bit for bit), the
    file holds zoo's tensors bit for bit (the layer scale reshaped to (C, 1, 1)), and torchvision
    gives the torch twin's logits."""
    config = registry.resolve_config("convnext", num_classes=7, image_size=64, **MICRO)
    torch.manual_seed(0)
    model = FAMILY.build_torch(config)
    tensors = randomised(model_tensors(model), seed=3)
    load_tensors(model, tensors)
    checkpoint = zoo.save_checkpoint(model, tmp_path / "zoo.safetensors")
    x = config.example_input(2, seed=1)
    np.save(tmp_path / "inputs.npy", x)
    expected = forward_torch(model, x, training=False)
    names = torchvision_names(config)
    for suffix in (".pth", ".safetensors"):
        path = export_checkpoint(checkpoint, "torchvision", tmp_path / f"torchvision{suffix}")
        written, _ = read_foreign(path)
        # torch.save keeps torchvision's state_dict order; safetensors stores keys sorted
        assert (
            list(written) == list(names.values()) if suffix == ".pth" else set(written) == set(names.values())
        )
        for ours, theirs in names.items():
            want = tensors[ours].reshape(-1, 1, 1) if ours.endswith(".gamma") else tensors[ours]
            assert written[theirs].shape == want.shape and written[theirs].tobytes() == want.tobytes(), theirs
        out = run_reference(tmp_path / f"ref{suffix}", "exported", str(path), str(tmp_path / "inputs.npy"))
        assert json.loads((out / "loaded.json").read_text()) == {"torchvision": []}
        assert relative_error(np.load(out / "torchvision.npy"), expected) <= REFERENCE


@pytest.mark.parametrize("task", ["classification", "features"])
def test_timm_loads_the_export_strictly(tmp_path, task):
    """A 1-channel, 1x1-patch zoo ConvNeXt (and its headless features form), randomised, exported:
    timm loads every tensor as written both ways it reads a local checkpoint, and gives the torch
    twin's output."""
    config = registry.resolve_config(
        "convnext-micro", in_channels=1, image_size=16, num_classes=5, task=task, head_dropout=0.1
    )
    torch.manual_seed(0)
    model = FAMILY.build_torch(config)
    load_tensors(model, randomised(model_tensors(model), seed=4))
    checkpoint = zoo.save_checkpoint(model, tmp_path / "zoo.safetensors")
    export_checkpoint(checkpoint, "timm", tmp_path / "timm")
    x = config.example_input(2, seed=1)
    np.save(tmp_path / "inputs.npy", x)
    out = run_reference(tmp_path / "ref", "exported", str(tmp_path / "timm"), str(tmp_path / "inputs.npy"))
    assert json.loads((out / "loaded.json").read_text()) == {"local-dir": [], "file": []}
    expected = forward_torch(model, x, training=False)
    for route in ("local-dir", "file"):
        assert relative_error(np.load(out / f"{route}.npy"), expected) <= REFERENCE, route


# ------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"depths": [3, 3, 9]},
            r"depths gives one value for each of ConvNeXt's 4 stages, .* got 3: \[3, 3, 9\]",
        ),
        ({"dims": [8, 16]}, r"dims gives one value .* \[96, 192, 384, 768\] for convnext-tiny; got 2"),
        ({"depths": [1, 0, 1, 1]}, "greater than or equal to 1"),
        (
            {"image_size": 24},
            r"images must be at least 32 pixels a side for patch_size 4 .*got 24: resize the images to 32 "
            r"or more, or use patch_size 3 or less",
        ),
        (
            {"image_size": 7, "patch_size": 1},
            r"at least 8 pixels .* got 7: resize the images to 8 or more \[t",
        ),
        ({"task": "segmentation"}, "'classification' or 'features'"),
    ],
)
def test_invalid_configs_are_refused_with_what_would_work(fields, message):
    with pytest.raises(ValueError, match=message):
        registry.resolve_config("convnext", **fields)


def test_features_are_not_trained_alone(tmp_path):
    """The data decides the task: a features backbone on labelled images is refused before training."""
    overrides = ["model.architecture=convnext-micro", "model.task=features", f"export.dir={tmp_path}"]
    with pytest.raises(ValueError, match=r"model\.task is 'features' but the data has 'classification'"):
        zoo.train(RECIPE, "lightning", overrides)
    assert not any(tmp_path.iterdir())


def test_config_arithmetic_follows_torch():
    for fields in ({"image_size": 64}, {"image_size": 37}, {"image_size": 8, "patch_size": 1}):
        config = registry.resolve_config("convnext", **MICRO, **fields)
        model = FAMILY.build_torch(config).eval()
        with torch.no_grad():
            features = model.forward_features(torch.from_numpy(config.example_input(1)))
        assert tuple(features.shape) == (1, config.num_features, config.feature_size(), config.feature_size())


# ------------------------------------------------------------------------- twin against twin


@pytest.mark.parametrize("task", ["classification", "features"])
def test_twins_agree_with_every_tensor_random(task):
    config = registry.resolve_config("convnext-micro", image_size=16, num_classes=6, task=task)
    torch.manual_seed(0)
    tensors = randomised(model_tensors(FAMILY.build_torch(config)), seed=2)
    _, torch_model, keras_model = twins("convnext-micro", tensors, image_size=16, num_classes=6, task=task)
    x = config.example_input(3, seed=5)
    for training in (False, True):
        expected = forward_torch(torch_model, x, training)
        assert expected.shape == (3, 6 if task == "classification" else 128)
        assert relative_error(forward_keras(keras_model, x, FAMILY, training), expected) <= TWINS, training


def test_timm_interface_in_both_twins():
    config, torch_model, keras_model = twins("convnext-micro", image_size=16, num_classes=4)
    x = config.example_input(2, seed=1)
    torch_model.eval()
    with torch.no_grad():
        features = torch_model.forward_features(torch.from_numpy(x))
        pooled = torch_model.forward_head(features, pre_logits=True)
        assert torch.equal(torch_model.forward_head(features), torch_model(torch.from_numpy(x)))
    assert tuple(features.shape) == (2, 128, 2, 2) and tuple(pooled.shape) == (2, 128)
    keras_features = keras_model.forward_features(keras_layout(x, "image"))
    np.testing.assert_allclose(
        np.asarray(keras_features).transpose(0, 3, 1, 2), features.numpy(), rtol=TWINS, atol=TWINS
    )
    keras_pooled = np.asarray(keras_model.forward_head(keras_features, pre_logits=True))
    np.testing.assert_allclose(keras_pooled, pooled.numpy(), rtol=TWINS, atol=TWINS)


def test_both_twins_refuse_an_image_too_small_in_the_same_words():
    config = registry.resolve_config("convnext", image_size=64, **MICRO)
    x = config.example_input(1)[:, :, :28, :]  # 28 x 64: the short side decides
    message = r"images must be at least 32 pixels a side for patch_size 4 .*got 28: .* patch_size 3 or less"
    with pytest.raises(InputError, match=message):
        forward_torch(FAMILY.build_torch(config), x, training=False)
    keras_model = FAMILY.build_keras(config)
    with pytest.raises(InputError, match=message):
        forward_keras(keras_model, x, FAMILY, training=False)
    import tensorflow as tf

    graph = tf.function(lambda images: keras_model(images), input_signature=[tf.TensorSpec((None,) * 4)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"at least 32 pixels .* got a smaller image"):
        graph(keras_layout(x, "image"))


# ---------------------------------------------------------------------- stochastic depth


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_drop_path_drops_whole_samples_in_training_only(framework):
    """Each sample's branch is kept (and scaled by 1 / (1 - rate)) or dropped whole; evaluation
    passes it unchanged. 4000 samples at rate 0.3: the dropped share is within 0.03 of 0.3
    (6.5 standard deviations of a binomial)."""
    rate, x = 0.3, np.ones((4000, 3, 2, 2), np.float32)
    if framework == "lightning":
        from zoo.nn.torch import DropPath

        layer = DropPath(rate)
        torch.manual_seed(0)
        trained = layer.train()(torch.from_numpy(x)).numpy()
        evaluated = layer.eval()(torch.from_numpy(x)).numpy()
    else:
        from zoo.nn.keras import DropPath

        layer = DropPath(rate, seed=0)
        trained = np.asarray(layer(x.transpose(0, 2, 3, 1), training=True)).transpose(0, 3, 1, 2)
        evaluated = np.asarray(layer(x.transpose(0, 2, 3, 1), training=False)).transpose(0, 3, 1, 2)
    per_sample = trained.reshape(len(x), -1)
    assert np.all(per_sample == per_sample[:, :1])  # one draw per sample
    kept = per_sample[per_sample[:, 0] != 0, 0]
    np.testing.assert_allclose(kept, 1 / (1 - rate), rtol=1e-6)
    assert abs(float(np.mean(per_sample[:, 0] == 0)) - rate) < 0.03
    assert np.array_equal(evaluated, x)


def test_drop_path_rates_rise_linearly_to_the_last_block_in_both_twins():
    config = registry.resolve_config("convnext-micro", image_size=8, path_dropout=0.4)
    expected = [0.0, 0.1, 0.2, 0.3, 0.4][: sum(config.depths)]
    torch_rates = [block.drop_path.rate for block in FAMILY.build_torch(config).blocks()]
    keras_rates = [block.drop_path.rate for block in FAMILY.build_keras(config).blocks()]
    assert torch_rates == pytest.approx(expected) and keras_rates == pytest.approx(expected)


def test_compare_switches_stochastic_depth_off_for_parity():
    from zoo.compare.twins import without_dropout

    config = registry.resolve_config("convnext-micro", path_dropout=0.2, head_dropout=0.1)
    parity, zeroed = without_dropout(config)
    assert zeroed == {"path_dropout": 0.2, "head_dropout": 0.1}
    assert parity.path_dropout == parity.head_dropout == 0.0


# --------------------------------------------------------------------------------- transfer


@pytest.fixture(scope="module")
def digits_cache(tmp_path_factory) -> Path:
    """One ``$ZOO_CACHE`` for the module: the embedded digits are written as PNGs once."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("freeze", [True, False], ids=["frozen", "unfrozen"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_finetune_an_imported_torchvision_convnext_on_the_digits(
    reference, digits_cache, framework, freeze, tmp_path, monkeypatch
):
    """``zoo import`` of torchvision's file, ``zoo finetune`` on digits 5-9 as 32x32 PNGs with the
    shipped recipe, ``zoo export`` back to torchvision: with the backbone frozen every tensor but
    the new 5-class head leaves bit for bit as torchvision wrote it; unfrozen, the backbone
    trains too. Either way the run learns (the loss falls)."""
    monkeypatch.setenv("ZOO_CACHE", str(digits_cache))  # the embedded digits folder
    published = reference / "torchvision-micro.pth"
    original, _ = read_foreign(published)
    imported = import_checkpoint(published, tmp_path / "in")
    overrides = [
        f"init.from={imported.path}", f"init.freeze_backbone={str(freeze).lower()}", "init.head_lr=0.01",
        "data.classes=['5','6','7','8','9']", "data.train_per_class=20", "data.batch_size=20",
        "data.workers=0", "trainer.max_epochs=2", "trainer.progress_bar=false",
        f"export.dir={tmp_path / 'runs'}",
    ]  # fmt: skip
    tuned = zoo.train(DIGITS32, framework, overrides)
    losses = [float(row["train_loss"]) for row in tuned.history]
    assert losses[-1] < losses[0]
    exported, _ = read_foreign(export_checkpoint(tuned.checkpoint, "torchvision", tmp_path / "out.pth"))
    assert exported.keys() == original.keys()
    moved = [name for name, value in original.items() if not np.array_equal(exported[name], value)]
    if freeze:
        assert moved == ["classifier.2.weight", "classifier.2.bias"]
    else:
        assert {"features.0.0.weight", "features.1.0.layer_scale", "features.7.0.block.3.weight"} <= set(
            moved
        )
    assert exported["classifier.2.weight"].shape == (5, 128) and original["classifier.2.weight"].shape == (
        10,
        128,
    )


@pytest.mark.slow  # 194 s measured on the shared 2-core machine (30 compare steps, twice, at bf16)
def test_compare_passes_on_the_recipe_at_bf16_mixed(digits_cache, tmp_path, monkeypatch):
    """``zoo compare`` through both trainers at bf16-mixed: each twin within its own bf16 rounding of
    the other (32-true is tests/test_compare_recipes.py's case of the shipped recipe)."""
    from compare_cases import OTHER_STEPS, SECTIONS

    from zoo.compare import compare

    monkeypatch.setenv("ZOO_CACHE", str(digits_cache))
    overrides = ["trainer.precision=bf16-mixed", "data.workers=0", f"export.dir={tmp_path}"]
    result = compare(DIGITS32, steps=OTHER_STEPS, overrides=overrides, speed_steps=0, write=False)
    assert result.verdicts == dict.fromkeys(SECTIONS, "PASS"), result.text
    assert result.sections["forward"].details["reference"] == "float32"
