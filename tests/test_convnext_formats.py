"""The convnext family's foreign formats: what torchvision and timm files zoo reads and writes, and
what it refuses, naming the keys or fields that do not fit.

The files come from ``tests/reference/torchvision_convnext.py`` (see ``tests/test_convnext.py``);
the numbers they give are tested there, the layouts here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy

import zoo
from architectures.convnext.formats import timm_to_zoo, torchvision_to_zoo, zoo_to_timm, zoo_to_torchvision
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.checkpoint.tables import tensor_specs
from zoo.checkpoint.tensors import model_tensors
from zoo.interchange import InterchangeError
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint
from zoo.preprocessing import ImagePreprocessing, Preprocessing

FAMILY = registry.get_family("convnext")
MICRO = {"depths": [1, 1, 2, 1], "dims": [16, 32, 64, 128]}


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("torchvision_convnext.py")


@pytest.fixture(scope="module")
def torchvision_tensors(reference) -> dict[str, np.ndarray]:
    return read_foreign(reference / "torchvision-micro.pth")[0]


@pytest.fixture(scope="module")
def timm_files(reference) -> tuple[dict[str, np.ndarray], dict]:
    return read_foreign(reference / "timm-micro-gray")


def _tensors(config) -> dict[str, np.ndarray]:
    return {k: np.zeros(s.shape, s.dtype) for k, s in tensor_specs(FAMILY.weight_table(config)).items()}


def test_each_format_reads_only_its_own_layout(torchvision_tensors, timm_files):
    tensors, meta = timm_files
    with pytest.raises(ForeignLayoutError, match=r"not a torchvision ConvNeXt: no 'features.0.0.weight'"):
        torchvision_to_zoo(tensors, {})
    with pytest.raises(ForeignLayoutError, match=r"not a timm ConvNeXt: no 'stem.0.weight'") as error:
        timm_to_zoo(torchvision_tensors, {})
    assert error.value.unplaced[0] == "features.0.0.weight"
    with pytest.raises(ForeignLayoutError, match="torchvision writes none"):
        torchvision_to_zoo(torchvision_tensors, meta)
    resnet = model_tensors(zoo.create_model("resnet-micro"))
    for read in (torchvision_to_zoo, timm_to_zoo):
        with pytest.raises(ForeignLayoutError, match=r"first keys are conv1.weight"):
            read(resnet, {})


def test_keys_that_do_not_fit_are_named(torchvision_tensors, timm_files):
    tensors = dict(torchvision_tensors)
    missing = {k: v for k, v in tensors.items() if k != "features.5.1.layer_scale"}
    with pytest.raises(ForeignLayoutError, match=r"missing features.5.1.layer_scale"):
        torchvision_to_zoo(missing, {})
    narrow = {**tensors, "features.3.0.block.3.weight": tensors["features.3.0.block.3.weight"][:64]}
    with pytest.raises(
        ForeignLayoutError, match=r"features.3.0.block.3.weight \(64, 32\) \(expected \(128, 32\)\)"
    ):
        torchvision_to_zoo(narrow, {})
    headless = {k: v for k, v in tensors.items() if not k.startswith("classifier.2")}
    with pytest.raises(ForeignLayoutError, match="torchvision's ConvNeXt always has its classifier"):
        torchvision_to_zoo(headless, {})
    five_stages = {**tensors, "features.9.0.block.0.weight": np.zeros((8, 1, 7, 7), np.float32)}
    with pytest.raises(ForeignLayoutError, match=r"of 4 stages: blocks in stages \[4\]") as error:
        torchvision_to_zoo(five_stages, {})
    assert error.value.unplaced == ["features.9.0.block.0.weight"]

    timm, _ = timm_files
    grn = {**timm, "stages.0.blocks.0.mlp.grn.weight": np.zeros(64, np.float32)}  # ConvNeXt-V2
    with pytest.raises(ForeignLayoutError, match=r"unplaced stages.0.blocks.0.mlp.grn.weight"):
        timm_to_zoo(grn, {})
    conv_mlp = {
        **timm,
        "stages.0.blocks.0.mlp.fc1.weight": timm["stages.0.blocks.0.mlp.fc1.weight"][..., None, None],
    }
    with pytest.raises(
        ForeignLayoutError, match=r"stages.0.blocks.0.mlp.fc1.weight \(64, 16, 1, 1\) \(expected"
    ):
        timm_to_zoo(conv_mlp, {})
    # timm's stride-2 stems (patch_size 2) give the first stage a downsampling of its own
    downsampling = {**timm, "stages.0.downsample.1.weight": np.zeros((16, 16, 2, 2), np.float32)}
    with pytest.raises(ForeignLayoutError, match=r"unplaced stages.0.downsample.1.weight"):
        timm_to_zoo(downsampling, {})


def test_timm_without_a_classifier_is_a_features_backbone(reference):
    tensors, meta = read_foreign(reference / "timm-micro-features")
    fields, placed = timm_to_zoo(tensors, meta)
    assert fields["task"] == "features" and "num_classes" not in fields
    assert "head.norm.weight" in placed and not any(k.startswith("head.fc") for k in placed)


def test_timm_config_json_must_describe_the_weights(timm_files):
    tensors, meta = timm_files
    fields, _ = timm_to_zoo(tensors, meta)
    assert (fields["in_channels"], fields["patch_size"], fields["num_classes"]) == (1, 1, 7)
    args = meta["model_args"]
    with pytest.raises(
        ForeignLayoutError, match="'convnext_atto'; zoo's convnext reads timm's plain ConvNeXts"
    ):
        timm_to_zoo(tensors, {**meta, "architecture": "convnext_atto"})
    with pytest.raises(
        ForeignLayoutError, match=r"describes timm's convnext_tiny with dims \[16, 32, 64, 256\]"
    ):
        timm_to_zoo(tensors, {**meta, "model_args": {**args, "dims": [16, 32, 64, 256]}})
    without_shapes = {k: v for k, v in args.items() if k not in ("depths", "dims")}
    with pytest.raises(ForeignLayoutError, match=r"depths \[3, 3, 9, 3\] \(the tensors: \[1, 1, 2, 1\]\)"):
        timm_to_zoo(tensors, {**meta, "model_args": without_shapes})
    for key, value in (("kernel_sizes", 5), ("global_pool", "max"), ("use_grn", True), ("norm_eps", 1e-5)):
        with pytest.raises(ForeignLayoutError, match=f"model_args {{'{key}': {value!r}}} change timm's"):
            timm_to_zoo(tensors, {**meta, "model_args": {**args, key: value}})
    extra = {"drop_rate": 0.2, "drop_path_rate": 0.1, "ls_init_value": 1e-5, "head_init_scale": 0.5}
    fields, _ = timm_to_zoo(tensors, {**meta, "model_args": {**args, **extra}})
    assert (fields["head_dropout"], fields["path_dropout"], fields["layer_scale"]) == (0.2, 0.1, 1e-5)


@pytest.mark.parametrize(
    ("fields", "refused_by", "message"),
    [
        ({"in_channels": 1}, ("torchvision",), "its stem reads 3 channels; this model reads 1"),
        ({"patch_size": 1}, ("torchvision",), "its stem cuts 4x4 patches; this model's patch_size is 1"),
        (
            {"task": "features"},
            ("torchvision",),
            "always has its classifier; this model is a features backbone",
        ),
        ({"patch_size": 2}, ("torchvision", "timm"), r"4x4 patches|first stage that downsamples again"),
    ],
)
def test_export_refuses_what_the_library_cannot_build(fields, refused_by, message):
    config = registry.resolve_config("convnext", image_size=64, **MICRO, **fields)
    writers = {"torchvision": zoo_to_torchvision, "timm": zoo_to_timm}
    for library, write in writers.items():
        if library in refused_by:
            with pytest.raises(ForeignLayoutError, match=message):
                write(config, _tensors(config))
        else:
            write(config, _tensors(config))


def test_timm_export_names_the_architecture_timm_builds():
    base = registry.resolve_config("convnext-base", num_classes=5)
    meta = zoo_to_timm(base, _tensors(base))[1]
    assert meta["architecture"] == "convnext_base" and "dims" not in meta["model_args"]
    custom = registry.resolve_config(
        "convnext-micro", in_channels=1, image_size=16, num_classes=3, path_dropout=0.1, head_dropout=0.2
    )
    tensors, meta = zoo_to_timm(custom, _tensors(custom))
    assert meta["architecture"] == "convnext_tiny"
    assert meta["model_args"] == {
        **MICRO, "num_classes": 3, "in_chans": 1, "patch_size": 1, "drop_rate": 0.2, "drop_path_rate": 0.1,
        "global_pool": "avg",
    }  # fmt: skip
    assert meta["pretrained_cfg"]["input_size"] == [1, 16, 16] and meta["pretrained_cfg"]["pool_size"] == [
        2,
        2,
    ]
    fields, back = timm_to_zoo(tensors, meta)  # what zoo writes, it reads
    assert registry.resolve_config("convnext", **fields) == custom.model_copy(update={"preset": None})
    assert list(back) == list(tensors)


def test_zoo_export_reports_a_refused_config(tmp_path):
    config = registry.resolve_config("convnext-micro", image_size=8)
    checkpoint = zoo.save_checkpoint(FAMILY.build_torch(config), tmp_path / "micro.safetensors")
    with pytest.raises(InterchangeError, match=r"cannot be written as torchvision: .* patch_size is 1"):
        export_checkpoint(checkpoint, "torchvision", tmp_path / "out.pth")
    assert not (tmp_path / "out.pth").exists()
    written = export_checkpoint(checkpoint, "timm", tmp_path / "timm")  # timm takes any patch but 2
    assert json.loads((written.parent / "config.json").read_text())["model_args"]["patch_size"] == 1
    again = import_checkpoint(written.parent, tmp_path / "again")
    assert again.config.model_dump(exclude={"preset"}) == config.model_dump(exclude={"preset"})


# ------------------------------------------------------------------------------------ preprocessing


def test_a_torchvision_import_records_the_eval_transform_of_torchvisions_weights_of_its_shape():
    """Each size's against ``ConvNeXt_*_Weights.IMAGENET1K_V1.transforms()`` (the resize differs by
    size); a shape torchvision publishes no weights of records none."""
    out = reference_env.fixtures("torchvision_image_transforms.py")
    theirs = json.loads((out / "cases.json").read_text())["convnext_eval"]
    shapes = {"tiny": "convnext-tiny", "small": "convnext-small", "base": "convnext-base"}
    read = FAMILY.format("torchvision").read_preprocessing
    for size, weights in theirs.items():
        fields = {"depths": [3, 3, 27, 3], "dims": [192, 384, 768, 1536]} if size == "large" else {}
        config = registry.resolve_config(shapes.get(size, "convnext"), **fields)
        image = read(config, {}).image
        assert ([image.size], [image.resize], image.interpolation) == (
            weights["size"],
            weights["resize"],
            weights["interpolation"],
        ), size
        assert (list(image.mean), list(image.std)) == (weights["mean"], weights["std"]), size
    assert read(registry.resolve_config("convnext-micro", patch_size=4), {}) is None
    assert read(registry.resolve_config("convnext-tiny", image_size=64), {}) is None


def test_a_timm_import_records_its_pretrained_cfg_and_label_names(timm_files, tmp_path):
    """timm's own config.json (a 1-channel model: timm writes one mean and std), read as timm's
    resolve_data_config reads it, with label names added."""
    tensors, meta = timm_files
    folder = tmp_path / "timm"
    folder.mkdir()
    safetensors.numpy.save_file(tensors, folder / "model.safetensors")
    names = [f"class {i}" for i in range(7)]
    (folder / "config.json").write_text(json.dumps({**meta, "label_names": names}))
    recorded = read_checkpoint(import_checkpoint(folder, tmp_path / "zoo").path).preprocessing
    timm = meta["pretrained_cfg"]
    assert timm["input_size"] == [1, 224, 224] and len(timm["mean"]) == 1
    assert recorded.image == ImagePreprocessing(
        size=224,
        resize=math.floor(224 / timm["crop_pct"]),
        interpolation=timm["interpolation"],
        channels="grayscale",
        mean=tuple(timm["mean"]),
        std=tuple(timm["std"]),
    )
    assert recorded.labels == tuple(names)


def test_a_features_backbone_records_the_transform_and_no_label_names(reference):
    tensors, meta = read_foreign(reference / "timm-micro-features")
    config = registry.resolve_config("convnext", **timm_to_zoo(tensors, meta)[0])
    found = FAMILY.format("timm").read_preprocessing(config, {**meta, "label_names": ["a", "b"]})
    assert found.labels is None and found.image.size == config.image_size


def test_a_timm_export_writes_the_checkpoints_mean_std_crop_and_labels(tmp_path):
    config = registry.resolve_config("convnext-micro", num_classes=3, image_size=32)
    image = ImagePreprocessing(size=32, resize=40, interpolation="bicubic", mean=(0.5,) * 3, std=(0.25,) * 3)
    recorded = Preprocessing(source="test", image=image, labels=("cat", "dog", "fox"))
    checkpoint = zoo.save_checkpoint(
        FAMILY.build_torch(config), tmp_path / "micro.safetensors", preprocessing=recorded
    )
    written = export_checkpoint(checkpoint, "timm", tmp_path / "timm")
    meta = json.loads((written.parent / "config.json").read_text())
    pretrained = meta["pretrained_cfg"]
    assert meta["label_names"] == ["cat", "dog", "fox"]
    assert (pretrained["mean"], pretrained["std"], pretrained["interpolation"]) == (
        [0.5] * 3,
        [0.25] * 3,
        "bicubic",
    )
    assert pretrained["input_size"] == [3, 32, 32] and int(32 / pretrained["crop_pct"]) == 40
    again = import_checkpoint(written.parent, tmp_path / "again")
    assert read_checkpoint(again.path).preprocessing == recorded.replace(
        source="timm config.json (pretrained_cfg)"
    )
