"""The vit family is timm's VisionTransformer: same weights in, same logits out, in both frameworks.

The oracle is ``tests/reference/timm_vit.py``, run once in the reference environment: timm's
``vit_tiny_patch16_224`` (3 x 224 x 224, 1000 classes, batch 2) and ``vit_base_patch16_224`` cut to
2 blocks at 3 x 48 x 48 (10 classes), seeded, with every tensor its initialisation leaves trivial
randomised, written by timm's own ``save_for_hf`` (``model.safetensors`` + ``config.json``), with its
logits and final-norm tokens. Those files go through the ``timm`` format directly and through
``zoo import`` (:func:`zoo.interchange.importing.import_checkpoint`, from the weights file alone and from the
directory) into zoo checkpoints that each twin loads.

Tolerance: relative error in the max norm, ``max |zoo - timm| / max |timm|`` over the whole
array, at most 1e-4 (float32), in eval and train mode (dropout 0). Measured (torch 2.13, TF 2.21,
CPU): torch twin 4.5e-7 (tiny) and 6.9e-7 (base-shallow), Keras twin 5.7e-7 and 1.3e-6; timm's
attention runs through ``scaled_dot_product_attention``, zoo's spells the same products out.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy
import torch
from conftest import RECIPE, forward_keras, forward_torch, relative_error

import zoo
from architectures.vit.formats import from_timm, timm_config, to_timm
from architectures.vit.resize import adapt_tensors, resample_pos_embed
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tables import tensor_specs
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.finetune import adapted_tensors
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint
from zoo.keras.data import keras_layout
from zoo.nn.errors import InputError
from zoo.preprocessing import ImagePreprocessing, Preprocessing

REFERENCE = 1e-4  # relative, max norm: zoo's twins against timm
FAMILY = registry.get_family("vit")
CASES = ("tiny", "base-shallow")
ROUTES = ("format", "file", "directory")
GRIDS = (3, 7, 24)  # as tests/reference/timm_vit.py
FINETUNE = ((112, 1), (64, 2), (224, 4))


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("timm_vit.py")


def timm_files(reference: Path, case: str) -> tuple[dict[str, np.ndarray], dict]:
    folder = reference / case
    return safetensors.numpy.load_file(folder / "model.safetensors"), json.loads(
        (folder / "config.json").read_text()
    )


@pytest.fixture(scope="module")
def imported(reference, tmp_path_factory) -> dict[tuple[str, str], Path]:
    """Each case through each route into a zoo checkpoint."""
    root = tmp_path_factory.mktemp("imported")
    found = {}
    for case in CASES:
        tensors, meta = timm_files(reference, case)
        fields, canonical = from_timm(tensors, meta)
        config = FAMILY.config.model_validate({**fields, "architecture": "vit"})
        torch_model = FAMILY.build_torch(config)
        load_tensors(torch_model, canonical)
        found[case, "format"] = zoo.save_checkpoint(torch_model, root / f"{case}-format.safetensors")
        found[case, "file"] = import_checkpoint(  # the weights alone: the head count is given
            reference / case / "model.safetensors", root / f"{case}-file", num_heads=fields["num_heads"]
        ).path
        found[case, "directory"] = import_checkpoint(reference / case, root / f"{case}-dir").path
    return found


# ------------------------------------------------------------------------------ the model


def test_parameter_counts_are_timms(reference):
    counts = json.loads((reference / "counts.json").read_text())
    for size in ("tiny", "small", "base"):
        entry = next(e for e in zoo.list_architectures() if e.name == f"vit-{size}")
        assert entry.parameters == counts[f"vit_{size}_patch16_224"], size


def test_torch_twin_initialises_as_timm_does(reference):
    """torch.manual_seed(0), then vit-tiny: timm's vit_tiny_patch16_224 tensors, bit for bit."""
    expected = json.loads((reference / "init.json").read_text())
    torch.manual_seed(0)
    model = FAMILY.build_torch(registry.resolve_config("vit-tiny"))
    ours, _ = to_timm(model.zoo_config, model_tensors(model))
    assert list(ours) == list(expected)
    digests = {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() for k, v in ours.items()}
    assert [k for k in expected if digests[k] != expected[k]] == []


@pytest.mark.parametrize("case", CASES)
def test_every_import_route_gives_the_same_checkpoint(imported, case):
    config = read_checkpoint(imported[case, "format"]).config
    first = safetensors.numpy.load_file(imported[case, "format"])
    for route in ROUTES[1:]:
        other = safetensors.numpy.load_file(imported[case, route])
        assert list(other) == list(first)
        assert all(np.array_equal(other[k], first[k]) for k in first), route
        assert read_checkpoint(imported[case, route]).config == config, route


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("framework", ["lightning", "keras"])
@pytest.mark.parametrize("case", CASES)
def test_logits_are_timms(reference, imported, case, framework, training):
    x = np.load(reference / f"{case}-inputs.npy")
    expected = np.load(reference / f"{case}-{'train' if training else 'eval'}.npy")
    model = zoo.load_checkpoint(imported[case, "directory"], framework=framework)
    if framework == "lightning":
        got = forward_torch(model, x, training)
    else:
        got = forward_keras(model, x, FAMILY, training)
    assert got.shape == expected.shape
    assert relative_error(got, expected) <= REFERENCE


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_features_are_timms(reference, imported, framework):
    """``forward_features``: the final-norm tokens, class token first, patches row by row."""
    x = np.load(reference / "base-shallow-inputs.npy")
    expected = np.load(reference / "base-shallow-features.npy")
    model = zoo.load_checkpoint(imported["base-shallow", "file"], framework=framework)
    if framework == "lightning":
        model.eval()
        with torch.no_grad():
            got = model.forward_features(torch.from_numpy(x)).numpy()
    else:
        got = np.asarray(model.forward_features(keras_layout(x, "image")))
    assert relative_error(got, expected) <= REFERENCE


def test_both_twins_refuse_an_image_of_another_size():
    config = registry.resolve_config("vit", image_size=32, patch_size=8, dim=16, num_heads=2, depth=1)
    x = config.example_input(1)[:, :, :16, :16]
    message = r"images must be 3 x 32 x 32 .*got 3 x 16 x 16"
    with pytest.raises(InputError, match=message):
        forward_torch(FAMILY.build_torch(config), x, training=False)
    with pytest.raises(InputError, match=message):
        forward_keras(FAMILY.build_keras(config), x, FAMILY, training=False)


def test_the_config_says_what_would_work():
    with pytest.raises(
        ValueError, match=r"image_size 40 is not divisible by patch_size 16.*\(4, 5, 8, 10, 20, 40\)"
    ):
        registry.resolve_config("vit", image_size=40)
    with pytest.raises(ValueError, match=r"dim 192 is not divisible by num_heads 5; .*num_heads in"):
        registry.resolve_config("vit", num_heads=5)
    with pytest.raises(ValueError, match=r"mlp_ratio 0.1 leaves the MLP int\(dim \* mlp_ratio\) = 0"):
        registry.resolve_config("vit", dim=8, num_heads=1, mlp_ratio=0.1)


# ------------------------------------------------------------------------- the timm format


@pytest.mark.parametrize("case", CASES)
def test_import_then_export_is_bit_identical(reference, imported, case, tmp_path):
    tensors, meta = timm_files(reference, case)
    path = export_checkpoint(imported[case, "directory"], "timm", tmp_path / "out")
    back = safetensors.numpy.load_file(path)
    assert sorted(back) == sorted(tensors)
    assert [
        k for k in tensors if back[k].dtype != tensors[k].dtype or not np.array_equal(back[k], tensors[k])
    ] == []
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    for key in ("architecture", "num_classes", "num_features", "global_pool", "model_args"):
        assert written[key] == meta[key], key  # what timm's own save_config_for_hf wrote


def run_reference(out: Path, *args: str) -> Path:
    return reference_env.run("timm_vit.py", out, *args)


def test_export_loads_strictly_in_timm(tmp_path):
    """A zoo ViT timm has no preset for (1 channel, 8x8 patches, dim 64, 3 MLP-ratio 2 blocks,
    7 classes), randomised, exported: timm loads every tensor as written, both ways it reads a
    local checkpoint, and gives the torch twin's logits."""
    config = registry.resolve_config(
        "vit", in_channels=1, image_size=32, num_classes=7, patch_size=8, dim=64, num_heads=4, depth=3,
        mlp_ratio=2.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = FAMILY.build_torch(config)
    rng = np.random.default_rng(0)
    load_tensors(
        model, {k: v + rng.normal(0, 0.1, v.shape).astype(v.dtype) for k, v in model_tensors(model).items()}
    )
    image = ImagePreprocessing(size=32, resize=36, interpolation="bicubic", channels="grayscale", mean=(0.3,),
                               std=(0.2,))  # fmt: skip
    recorded = Preprocessing(source="test", image=image)
    checkpoint = zoo.save_checkpoint(model, tmp_path / "zoo.safetensors", preprocessing=recorded)
    export_checkpoint(checkpoint, "timm", tmp_path / "timm")
    x = config.example_input(2, seed=1)
    np.save(tmp_path / "inputs.npy", x)
    out = run_reference(tmp_path / "ref", "exported", str(tmp_path / "timm"), str(tmp_path / "inputs.npy"))
    assert json.loads((out / "loaded.json").read_text()) == {"local-dir": [], "file": []}
    expected = forward_torch(model, x, training=False)
    for route in ("local-dir", "file"):
        assert relative_error(np.load(out / f"{route}.npy"), expected) <= REFERENCE, route
    # timm's own data config and eval transform of the export are the checkpoint's preprocessing.
    data = json.loads((out / "data_config.json").read_text())
    for route in ("local-dir", "file"):
        found = data[route]
        assert (found["input_size"], found["interpolation"], found["crop_mode"]) == (
            [1, 32, 32],
            "bicubic",
            "center",
        )
        assert (found["mean"], found["std"], found["resize"]) == ([0.3], [0.2], 36), route


def _small(**fields):
    return registry.resolve_config("vit", image_size=16, patch_size=4, dim=12, num_heads=3, depth=2, **fields)


def _timm_tensors(config, seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return to_timm(config, model_tensors(FAMILY.build_torch(config)))[0]


def test_the_format_refuses_what_zoo_vit_cannot_hold():
    config = _small()
    tensors, meta = _timm_tensors(config), timm_config(config)
    fields, _ = from_timm(tensors, meta)
    assert FAMILY.config.model_validate({**fields, "architecture": "vit"}) == config.model_copy(
        update={"preset": None}
    )
    with pytest.raises(ForeignLayoutError, match=r"unplaced fc_norm.weight") as found:
        from_timm({**tensors, "fc_norm.weight": np.ones(12, np.float32)}, meta)
    assert found.value.unplaced == ["fc_norm.weight"]
    with pytest.raises(ForeignLayoutError, match=r"model_args.depth says depth 3, the tensors 2"):
        from_timm(tensors, {**meta, "model_args": {**meta["model_args"], "depth": 3}})
    with pytest.raises(
        ForeignLayoutError, match=r"architecture 'vit_small_patch16_224' says dim 384, the tensors 12"
    ):
        from_timm(tensors, {"architecture": "vit_small_patch16_224.augreg_in21k"})
    with pytest.raises(ForeignLayoutError, match=r"model_args set \{'global_pool': 'avg'\}"):
        from_timm(tensors, {**meta, "model_args": {**meta["model_args"], "global_pool": "avg"}})
    with pytest.raises(
        ForeignLayoutError, match=r"how many attention heads their width-12 ViT .*--num-heads"
    ):
        from_timm(tensors, {})
    with pytest.raises(ForeignLayoutError, match=r"missing cls_token"):
        from_timm({k: v for k, v in tensors.items() if k != "cls_token"}, meta)


def test_weights_without_a_config_take_the_head_count_given_never_one_guessed_from_the_width(reference):
    tensors, meta = timm_files(reference, "base-shallow")
    with pytest.raises(ForeignLayoutError, match=r"width-768 ViT .*pass zoo import --num-heads N"):
        from_timm(tensors, {})
    fields, _ = from_timm(tensors, {}, num_heads=12)
    assert (fields["dim"], fields["num_heads"], fields["depth"], fields["image_size"]) == (768, 12, 2, 48)
    with pytest.raises(ForeignLayoutError, match=r"--num-heads 6 disagrees with config.json's architecture"):
        from_timm(tensors, meta, num_heads=6)


# ---------------------------------------------------------------- fine-tuning at another size


def test_position_embedding_resampling_is_timms(reference):
    pos_embed = read_foreign(reference / "tiny")[0]["pos_embed"]
    for grid in GRIDS:
        assert np.array_equal(
            resample_pos_embed(pos_embed, grid), np.load(reference / f"resample-{grid}.npy")
        )


@pytest.mark.parametrize(("size", "channels"), FINETUNE)
def test_finetuning_starts_where_timm_does(reference, imported, size, channels):
    """The plan's tensors for new data (image size, channels, 5 classes) are what timm loads from
    the same file into a model for that data: position embedding resampled, patch convolution
    adapted, everything else as it was (the new head is fresh in both)."""
    old = read_checkpoint(imported["tiny", "directory"]).config
    new = old.model_copy(update={"image_size": size, "in_channels": channels, "num_classes": 5})
    new = FAMILY.config.model_validate(new.model_dump())
    tensors = safetensors.numpy.load_file(imported["tiny", "directory"])
    specs = tensor_specs(FAMILY.weight_table(new))
    reshaped = {k for k, spec in specs.items() if spec.shape != tensors[k].shape}
    carried = adapted_tensors(FAMILY, tensors, old, new, reshaped - {"head.weight", "head.bias"}, specs)
    assert set(carried) == {"patch_embed.proj.weight"} | ({"pos_embed"} if size != old.image_size else set())
    start = to_timm(new, {**tensors, **carried, "head.weight": np.zeros((5, 192), np.float32),
                          "head.bias": np.zeros(5, np.float32)})[0]  # fmt: skip
    expected = safetensors.numpy.load_file(reference / f"finetune-{size}-c{channels}.safetensors")
    assert sorted(expected) == sorted(k for k in start if not k.startswith("head."))
    assert [k for k in expected if not np.array_equal(start[k], expected[k])] == []


def test_adapt_tensors_carries_nothing_when_the_grid_and_channels_stay():
    config = _small()
    tensors = model_tensors(FAMILY.build_torch(config))
    assert adapt_tensors(tensors, config, config.model_copy(update={"num_classes": 3})) == {}


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_finetune_on_smaller_grayscale_images_carries_the_backbone_over(framework, tmp_path, caplog):
    """A 3-channel 16x16 ViT fine-tuned on the 1-channel 8x8 digits: the plan says by name what it
    adapted and what it re-initialised; with the backbone frozen, the run ends with exactly the
    adapted position embedding and patch convolution."""
    source = _small(num_classes=4)
    torch.manual_seed(0)
    path = zoo.save_checkpoint(FAMILY.build_torch(source), tmp_path / "source.safetensors")
    before = safetensors.numpy.load_file(path)
    overrides = [
        "model.architecture=vit", f"init.from={path}", "init.freeze_backbone=true", "trainer.max_epochs=1",
        "trainer.progress_bar=false", "data.batch_size=256", f"export.dir={tmp_path}",
    ]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="zoo"):
        result = zoo.train(RECIPE, framework, overrides)
    assert (
        "adapted to the data: pos_embed [1, 17, 12] -> [1, 5, 12], "
        "patch_embed.proj.weight [12, 3, 4, 4] -> [12, 1, 4, 4]; re-initialised: head.weight, head.bias"
    ) in caplog.text
    after = safetensors.numpy.load_file(result.checkpoint)
    old = FAMILY.config.model_validate(source.model_dump())
    new = FAMILY.config.model_validate(
        {**source.model_dump(), "in_channels": 1, "image_size": 8, "num_classes": 10}
    )
    for name, value in adapt_tensors(before, old, new).items():
        assert np.array_equal(after[name], value), name
    assert after["head.weight"].shape == (10, 12)


# ----------------------------------------------------------------------- grad checkpointing


def _gradients(model, framework: str, x: np.ndarray, checkpointing: bool) -> dict[str, np.ndarray]:
    FAMILY.set_grad_checkpointing(model, framework, checkpointing)
    if framework == "lightning":
        model.train()
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        (model(torch.from_numpy(x)) ** 2).sum().backward()
        return {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
    import tensorflow as tf

    from zoo.checkpoint.tables import keras_layer

    table = FAMILY.weight_table(model.zoo_config)
    variables = [keras_layer(keras_layer(model, p.layer), v) for p in table for v in p.variables]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(keras_layout(x, "image"), training=True)))
    found = dict(zip(map(id, variables), tape.gradient(loss, variables), strict=True))
    out = {}
    for port in table:
        layer = keras_layer(model, port.layer)
        grads = [np.asarray(found[id(keras_layer(layer, v))]) for v in port.variables]
        out.update(zip((s.name for s in port.tensors), port.to_torch(*grads), strict=True))
    return out


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_grad_checkpointing_gives_the_same_gradients(framework):
    config = _small()
    x = config.example_input(3, seed=4)
    torch.manual_seed(0)
    model = FAMILY.build_torch(config) if framework == "lightning" else FAMILY.build_keras(config)
    plain = _gradients(model, framework, x, checkpointing=False)
    checkpointed = _gradients(model, framework, x, checkpointing=True)
    assert plain.keys() == checkpointed.keys() == set(tensor_specs(FAMILY.weight_table(config)))
    assert max(float(np.max(np.abs(plain[k] - checkpointed[k]))) for k in plain) <= 1e-6
    assert max(float(np.max(np.abs(g))) for g in plain.values()) > 1e-3  # gradients that say something


# --------------------------------------------------------------------------- the shared MLP


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu"])
def test_shared_mlp_twins_agree(activation):
    from zoo.checkpoint.keras_variables import tensors_to_keras
    from zoo.nn.keras import Mlp as KerasMlp
    from zoo.nn.ports import mlp
    from zoo.nn.torch import Mlp as TorchMlp

    x = np.random.default_rng(0).normal(size=(2, 5, 6)).astype(np.float32) * 3
    torch.manual_seed(0)
    torch_mlp = TorchMlp(6, 10, 4, activation)
    keras_mlp = KerasMlp(6, 10, 4, activation)
    keras_mlp(x)
    holder = type("Holder", (), {"mlp": keras_mlp})()
    tensors = {f"mlp.{k}": v.detach().numpy() for k, v in torch_mlp.state_dict().items()}
    tensors_to_keras(holder, mlp("mlp", 6, 10, 4), tensors)
    with torch.no_grad():
        expected = torch_mlp(torch.from_numpy(x)).numpy()
    assert relative_error(np.asarray(keras_mlp(x)), expected) <= 1e-6
