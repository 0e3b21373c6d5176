"""The resnet family's foreign formats: what torchvision and timm files zoo reads and writes, and
what it refuses, naming the keys or fields that do not fit.

The files come from ``tests/reference/torchvision_resnet.py`` (see ``tests/test_resnet.py``); the
numbers they give are tested there, the layouts here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy

import zoo
from architectures.resnet.formats import timm_to_zoo, torchvision_to_zoo, zoo_to_timm, zoo_to_torchvision
from zoo import registry
from zoo.checkpoint.foreign import ForeignLayoutError
from zoo.checkpoint.tables import tensor_specs
from zoo.checkpoint.tensors import model_tensors
from zoo.interchange import InterchangeError
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint

FAMILY = registry.get_family("resnet")


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("torchvision_resnet.py")


@pytest.fixture(scope="module")
def resnet18_tensors(reference) -> dict[str, np.ndarray]:
    return read_foreign(reference / "resnet18.pth")[0]


def test_an_unknown_layout_is_refused_naming_the_first_unplaced_keys(tmp_path):
    cnn = model_tensors(zoo.create_model("convnet-tiny"))
    with pytest.raises(
        ForeignLayoutError, match=r"no 'conv1.weight'.*first keys are stem.conv.weight"
    ) as error:
        torchvision_to_zoo(cnn, {})
    assert error.value.unplaced[:2] == ["stem.conv.weight", "stem.conv.bias"]
    path = tmp_path / "cnn.safetensors"
    safetensors.numpy.save_file(cnn, path)
    # safetensors stores keys sorted: the head's come first
    expected = r"(?s)first keys: head.fc.bias.*resnet / torchvision: .*its first keys are head.fc.bias"
    with pytest.raises(InterchangeError, match=expected):
        import_checkpoint(path, tmp_path / "out", architecture="resnet")


def test_keys_that_do_not_fit_are_named(resnet18_tensors):
    tensors = dict(resnet18_tensors)
    extra = {**tensors, "layer1.0.se.fc1.weight": np.zeros((4, 64), np.float32)}  # a SE-ResNet
    with pytest.raises(ForeignLayoutError, match=r"unplaced layer1.0.se.fc1.weight") as error:
        torchvision_to_zoo(extra, {})
    assert error.value.unplaced == ["layer1.0.se.fc1.weight"]
    missing = {k: v for k, v in tensors.items() if k != "layer3.1.bn2.weight"}
    with pytest.raises(ForeignLayoutError, match=r"missing layer3.1.bn2.weight"):
        torchvision_to_zoo(missing, {})
    narrow = {**tensors, "layer2.0.conv2.weight": tensors["layer2.0.conv2.weight"][:, :64]}
    with pytest.raises(ForeignLayoutError, match=r"layer2.0.conv2.weight \(128, 64, 3, 3\) \(expected"):
        torchvision_to_zoo(narrow, {})
    deep_stem = {("conv1.0.weight" if k == "conv1.weight" else k): v for k, v in tensors.items()}
    with pytest.raises(ForeignLayoutError, match=r"no 'conv1.weight'") as error:
        torchvision_to_zoo(deep_stem, {})
    assert error.value.unplaced[0] == "conv1.0.weight"
    headless = {k: v for k, v in tensors.items() if not k.startswith("fc.")}  # timm's num_classes=0
    with pytest.raises(ForeignLayoutError, match=r"no 'fc.weight'"):
        timm_to_zoo(headless, {})


def test_checkpoints_without_batch_counters_read_as_torch_reads_them(resnet18_tensors):
    """torchvision's published weights predate num_batches_tracked; torch's loader starts them at 0."""
    old = {k: v for k, v in resnet18_tensors.items() if not k.endswith("num_batches_tracked")}
    _, tensors = torchvision_to_zoo(old, {})
    counters = [k for k in tensors if k.endswith("num_batches_tracked")]
    assert len(counters) == 20 and all(tensors[k] == 0 and tensors[k].dtype == np.int64 for k in counters)
    assert list(tensors) == list(resnet18_tensors)


def test_timm_config_json_must_describe_the_weights(reference, resnet18_tensors):
    meta = json.loads((reference / "resnet18-timm" / "config.json").read_text())
    fields, _ = timm_to_zoo(resnet18_tensors, meta)
    assert fields["block"] == "basic" and fields["layers"] == [2, 2, 2, 2] and fields["num_classes"] == 10
    with pytest.raises(ForeignLayoutError, match="'resnet50d'; zoo's resnet reads timm's plain ResNets"):
        timm_to_zoo(resnet18_tensors, {**meta, "architecture": "resnet50d"})
    with pytest.raises(ForeignLayoutError, match=r"describes timm's resnet50 with block='bottleneck'"):
        timm_to_zoo(resnet18_tensors, {**meta, "architecture": "resnet50"})
    dilated = {**meta, "model_args": {**meta["model_args"], "output_stride": 16}}
    with pytest.raises(ForeignLayoutError, match="'output_stride': 16"):
        timm_to_zoo(resnet18_tensors, dilated)
    max_pooled = {**meta, "model_args": {**meta["model_args"], "global_pool": "max"}}
    with pytest.raises(ForeignLayoutError, match="global_pool is 'max'"):
        timm_to_zoo(resnet18_tensors, max_pooled)
    dropout = {**meta, "model_args": {**meta["model_args"], "drop_rate": 0.25}}
    assert timm_to_zoo(resnet18_tensors, dropout)[0]["dropout"] == 0.25
    # torchvision writes no config.json: weights with one are left to the format that wrote it
    with pytest.raises(ForeignLayoutError, match="torchvision writes none"):
        torchvision_to_zoo(resnet18_tensors, meta)


def _tensors(config) -> dict[str, np.ndarray]:
    return {k: np.zeros(s.shape, s.dtype) for k, s in tensor_specs(FAMILY.weight_table(config)).items()}


@pytest.mark.parametrize(
    ("fields", "refused_by", "message"),
    [
        (
            {"stem": "small", "image_size": 32},
            ("torchvision", "timm"),
            "'small' stem .* has no .* equivalent",
        ),
        ({"width": 32}, ("torchvision", "timm"), "64-channel stem .* width is 32"),
        ({"bn_eps": 1e-3}, ("torchvision", "timm"), "epsilon 1e-5; this model uses 0.001"),
        ({"in_channels": 1}, ("torchvision",), "conv1 for 3 input channels; this model reads 1"),
    ],
)
def test_export_refuses_what_the_library_cannot_build(fields, refused_by, message):
    config = registry.resolve_config("resnet", layers=[1, 1, 1, 1], **fields)
    writers = {"torchvision": zoo_to_torchvision, "timm": zoo_to_timm}
    for library, write in writers.items():
        if library in refused_by:
            with pytest.raises(ForeignLayoutError, match=message):
                write(config, _tensors(config))
        else:
            write(config, _tensors(config))


def test_timm_export_names_the_architecture_timm_builds(tmp_path):
    named = registry.resolve_config("resnet", block="bottleneck", layers=[2, 2, 2, 2], num_classes=5)
    meta = zoo_to_timm(named, _tensors(named))[1]
    assert meta["architecture"] == "resnet26" and "layers" not in meta["model_args"]
    custom = registry.resolve_config("resnet", layers=[1, 2, 1, 1], in_channels=1, image_size=64, dropout=0.1)
    tensors, meta = zoo_to_timm(custom, _tensors(custom))
    assert meta["architecture"] == "resnet18"
    assert meta["model_args"] == {
        "num_classes": 1000, "in_chans": 1, "layers": [1, 2, 1, 1], "drop_rate": 0.1, "global_pool": "avg"
    }  # fmt: skip
    assert meta["pretrained_cfg"]["input_size"] == [1, 64, 64] and meta["pretrained_cfg"]["pool_size"] == [
        2,
        2,
    ]
    fields, back = timm_to_zoo(tensors, meta)  # what zoo writes, it reads (the image size included)
    assert fields["image_size"] == 64 and registry.resolve_config("resnet", **fields) == custom
    assert list(back) == list(tensors)


def test_zoo_export_reports_a_refused_config(tmp_path):
    config = registry.resolve_config("resnet", stem="small", image_size=32, width=8, layers=[1, 1, 1, 1])
    torch_model = FAMILY.build_torch(config)
    checkpoint = zoo.save_checkpoint(torch_model, tmp_path / "small.safetensors")
    with pytest.raises(InterchangeError, match="cannot be written as timm: the 'small' stem"):
        export_checkpoint(checkpoint, "timm", tmp_path / "timm")
    assert not (tmp_path / "timm").exists()
