"""torchvision's and timm's ConvNeXt weights, in and out of the convnext family.

zoo's names are timm's, so a timm state dict is read by checking it, not renaming it.
torchvision holds the same tensors in an ``nn.Sequential`` of stages and downsamplings
(``features``), with index names inside a block and its layer scale shaped (C, 1, 1)::

    stem.0 / stem.1                        <-> features.0.0 / features.0.1
    stages.S.downsample.0 / .1  (S >= 1)   <-> features.{2S}.0 / features.{2S}.1
    stages.S.blocks.J.gamma  (C,)          <-> features.{2S+1}.J.layer_scale  (C, 1, 1)
    stages.S.blocks.J.conv_dw              <-> features.{2S+1}.J.block.0
    stages.S.blocks.J.norm                 <-> features.{2S+1}.J.block.2
    stages.S.blocks.J.mlp.fc1 / .fc2       <-> features.{2S+1}.J.block.3 / .block.5
    head.norm / head.fc                    <-> classifier.0 / classifier.2

Reading infers the config from the tensors (channels, patch and first width from the stem
convolution, the widths and blocks per stage from the depthwise convolutions, the classes
from the classifier; a timm model without ``head.fc``, created with ``num_classes=0``, is read
as task "features"), then compares every name and shape with the weight table of that config
and refuses whatever does not fit by name: the GRN of ConvNeXt-V2, timm's 1x1-convolution
MLPs (``conv_mlp``), a first stage that downsamples (timm's patch_size 2), an MLP head. A timm
``config.json`` beside the weights must describe the same plain ConvNeXt: its ``model_args``
that change the network without changing a tensor's shape (another kernel or norm, another
pooling) are refused by name (``architectures.convnext.timm_config`` reads and writes it).

How the images were prepared travels too (zoo.preprocessing): a timm ``config.json``'s
``pretrained_cfg`` (input size, crop, interpolation, mean, std) and ``label_names`` are read
as timm reads them (zoo.preprocessing.read_timm_config). A torchvision state dict says nothing
of its images, but its shape says which of torchvision's ImageNet weights it has the shape of,
and each has its own eval transform (:data:`TORCHVISION_EVAL`: the resize differs by size);
a ConvNeXt of another shape is none of them, and records none.

Writing is the reverse, for configs the library builds: torchvision's stem is fixed at 3
channels and 4x4 patches and always has its classifier; timm reads every config except
patch_size 2 (its first stage then downsamples). For timm the ``config.json`` is what
``timm.create_model("local-dir:DIR", pretrained=True)`` reads (its ``pretrained_cfg``
carrying the checkpoint's preprocessing, where it records one), or equally
``timm.create_model(cfg["architecture"], pretrained=True,
pretrained_cfg_overlay=dict(cfg["pretrained_cfg"], file=".../model.safetensors"), **cfg["model_args"])``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import ValidationError

from architectures.convnext.config import STAGES, ConvNeXtConfig
from architectures.convnext.timm_config import timm_config, timm_config_fields
from architectures.convnext.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, check_shapes, renamed
from zoo.checkpoint.tables import tensor_specs
from zoo.preprocessing import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImagePreprocessing,
    Preprocessing,
    read_timm_config,
)


def _torchvision_eval(resize: int) -> ImagePreprocessing:
    return ImagePreprocessing(
        size=224,
        resize=resize,
        interpolation="bilinear",
        channels="rgb",
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
    )


# The eval transform of torchvision's ImageNet ConvNeXt weights by their (depths, dims)
# (``ConvNeXt_{Tiny,Small,Base,Large}_Weights.IMAGENET1K_V1.transforms()``: ImageClassification,
# crop 224, bilinear, ImageNet's mean and std, and a resize of its own for each size;
# tests/test_convnext_formats.py checks them against torchvision's own).
TORCHVISION_EVAL = {
    ((3, 3, 9, 3), (96, 192, 384, 768)): _torchvision_eval(236),
    ((3, 3, 27, 3), (96, 192, 384, 768)): _torchvision_eval(230),
    ((3, 3, 27, 3), (128, 256, 512, 1024)): _torchvision_eval(232),
    ((3, 3, 27, 3), (192, 384, 768, 1536)): _torchvision_eval(232),
}


# ------------------------------------------------------------------------------------ layouts

# torchvision's names of the modules inside a block (an nn.Sequential with two Permutes and the
# GELU between them) and of the stem and the head, by zoo's.
TORCHVISION_BLOCK = {"conv_dw": "block.0", "norm": "block.2", "mlp.fc1": "block.3", "mlp.fc2": "block.5"}
TORCHVISION_OUTER = {"stem.0": "features.0.0", "stem.1": "features.0.1", "head.norm": "classifier.0",
                     "head.fc": "classifier.2"}  # fmt: skip


def torchvision_names(cfg: ConvNeXtConfig) -> dict[str, str]:
    """zoo's canonical name -> torchvision's, for every tensor of ``cfg``, in table order (which
    is torchvision's ``state_dict`` order too)."""
    names = {}
    for name in tensor_specs(table(cfg)):
        module, _, tensor = name.rpartition(".")
        if match := re.fullmatch(r"stages\.(\d)\.blocks\.(\d+)(?:\.(.*))?", module):
            stage, index, layer = match.groups()
            target = f"{TORCHVISION_BLOCK[layer]}.{tensor}" if layer else "layer_scale"
            names[name] = f"features.{2 * int(stage) + 1}.{index}.{target}"
        elif match := re.fullmatch(r"stages\.(\d)\.downsample\.(\d)", module):
            names[name] = f"features.{2 * int(match[1])}.{match[2]}.{tensor}"
        else:
            names[name] = f"{TORCHVISION_OUTER[module]}.{tensor}"
    return names


def _timm_names(cfg: ConvNeXtConfig) -> dict[str, str]:
    return {name: name for name in tensor_specs(table(cfg))}


# A layout as the tensors show it: where the stem, the blocks and the classifier sit.
TORCHVISION = {
    "stem": "features.0.0.weight",
    "block": re.compile(r"features\.(\d+)\.(\d+)\.block\."),
    "stage": lambda index: (index - 1) // 2 if index % 2 else None,
    "dwconv": "features.{}.0.block.0.weight",
    "dwconv_index": lambda stage: 2 * stage + 1,
    "classifier": "classifier.2.weight",
    "names": torchvision_names,
}
TIMM = {
    "stem": "stem.0.weight",
    "block": re.compile(r"stages\.(\d+)\.blocks\.(\d+)\."),
    "stage": lambda index: index,
    "dwconv": "stages.{}.blocks.0.conv_dw.weight",
    "dwconv_index": lambda stage: stage,
    "classifier": "head.fc.weight",
    "names": _timm_names,
}


# ------------------------------------------------------------------------------------ reading


def torchvision_to_zoo(tensors: Tensors, meta: Mapping[str, Any]) -> tuple[dict[str, Any], Tensors]:
    """A torchvision ``ConvNeXt`` state dict -> (config fields, canonical tensors).

    torchvision writes no ``config.json``: weights that come with one are another library's."""
    if meta:
        raise ForeignLayoutError(
            f"these weights come with a config.json (architecture {meta.get('architecture')!r}); torchvision "
            "writes none: read them as the format that wrote it (timm)"
        )
    fields = infer_fields(tensors, TORCHVISION, "torchvision")
    return _placed(tensors, fields, TORCHVISION, "torchvision")


def timm_to_zoo(tensors: Tensors, meta: Mapping[str, Any]) -> tuple[dict[str, Any], Tensors]:
    """A timm ``ConvNeXt`` state dict (and its ``config.json``, if any) -> (config fields, tensors)."""
    fields = infer_fields(tensors, TIMM, "timm")
    if meta:
        fields.update(timm_config_fields(meta, fields))
    return _placed(tensors, fields, TIMM, "timm")


def torchvision_preprocessing(config: ConvNeXtConfig, meta: Mapping[str, Any]) -> Preprocessing | None:
    """What a torchvision state dict's images went through: the eval transform of torchvision's
    ImageNet weights of its shape (None for a shape torchvision publishes no weights of, or a
    size other than the 224 they were evaluated at)."""
    image = TORCHVISION_EVAL.get((tuple(config.depths), tuple(config.dims)))
    if image is None or config.sample_shape() != (image.channel_count, image.size, image.size):
        return None
    return Preprocessing(source="torchvision's ImageNet weights' eval transform", image=image)


def timm_preprocessing(config: ConvNeXtConfig, meta: Mapping[str, Any]) -> Preprocessing | None:
    """What timm's config.json says: its pretrained_cfg, and its label_names for a classifier
    (a features backbone, timm's num_classes=0, has no classes to name)."""
    read = dict(meta)
    if config.task != "classification" and read:
        read.pop("label_names", None)
        read["pretrained_cfg"] = {
            k: v for k, v in (read.get("pretrained_cfg") or {}).items() if k != "label_names"
        }
    size = (config.in_channels, config.image_size, config.image_size)
    return read_timm_config(read, config.num_classes, size)


def infer_fields(tensors: Mapping[str, np.ndarray], layout: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The config fields the tensors imply; what they cannot imply is refused by name."""
    stem = tensors.get(layout["stem"])
    if stem is None or np.ndim(stem) != 4 or stem.shape[2] != stem.shape[3]:
        found = f"no {layout['stem']!r}" if stem is None else f"{layout['stem']!r} of shape {np.shape(stem)}"
        raise ForeignLayoutError(
            f"not a {source} ConvNeXt: {found} (its stem is one square convolution {layout['stem']!r} "
            f"(dims[0], in_channels, patch, patch)); its first keys are {_first(tensors)}",
            unplaced=[key for key in tensors if key != layout["stem"]],
            missing=[] if stem is not None else [layout["stem"]],
        )
    blocks: dict[int, set[int]] = {}
    for key in tensors:
        if match := layout["block"].match(key):
            stage = layout["stage"](int(match[1]))
            if stage is not None:
                blocks.setdefault(stage, set()).add(int(match[2]))
    extra = sorted(stage for stage in blocks if stage >= STAGES)
    absent = [stage for stage in range(STAGES) if stage not in blocks]
    if extra or absent:
        raise ForeignLayoutError(
            f"not a {source} ConvNeXt of {STAGES} stages: "
            + (f"blocks in stages {extra}" if extra else f"no blocks in stages {absent}")
            + f"; its first keys are {_first(tensors)}",
            unplaced=[
                k for k in tensors if (m := layout["block"].match(k)) and layout["stage"](int(m[1])) in extra
            ],
            missing=[layout["dwconv"].format(layout["dwconv_index"](stage)) for stage in absent],
        )
    dims = []
    for stage in range(STAGES):
        key = layout["dwconv"].format(layout["dwconv_index"](stage))
        weight = tensors.get(key)
        if weight is None or np.ndim(weight) != 4 or weight.shape[1] != 1:
            found = "absent" if weight is None else f"of shape {np.shape(weight)}"
            raise ForeignLayoutError(
                f"{key} is {found}: a ConvNeXt block opens with a depthwise convolution (dim, 1, k, k)",
                unplaced=[] if weight is None else [key],
                missing=[key] if weight is None else [],
            )
        dims.append(int(weight.shape[0]))
    fields: dict[str, Any] = {
        "in_channels": int(stem.shape[1]),
        "patch_size": int(stem.shape[2]),
        "depths": [max(blocks[stage]) + 1 for stage in range(STAGES)],  # a gap shows up as missing keys
        "dims": dims,
    }
    classifier = tensors.get(layout["classifier"])
    if classifier is not None:
        fields.update(task="classification", num_classes=int(np.shape(classifier)[0]))
    elif layout is TIMM:
        fields["task"] = "features"  # timm's num_classes=0: the head's norm, no classifier
    else:
        raise ForeignLayoutError(
            f"no {layout['classifier']!r}: torchvision's ConvNeXt always has its classifier",
            missing=[layout["classifier"]],
        )
    return fields


def _placed(
    tensors: Tensors, fields: dict[str, Any], layout: Mapping[str, Any], source: str
) -> tuple[dict[str, Any], Tensors]:
    """The tensors in the table order of ``fields``' config, each name and shape checked."""
    try:
        config = ConvNeXtConfig(**fields)
    except ValidationError as error:
        raise ForeignLayoutError(
            f"the {source} weights imply an invalid convnext config {fields}: {error}"
        ) from error
    names: dict[str, str] = layout["names"](config)
    placed = renamed(
        tensors, {theirs: ours for ours, theirs in names.items()}, what=f"{source} ConvNeXt weights"
    )
    specs = tensor_specs(table(config))
    # torchvision's layer scale is (C, 1, 1), a shape that broadcasts over its channels-first map.
    placed = {
        k: np.reshape(v, specs[k].shape)
        if k.endswith(".gamma") and np.size(v) == np.prod(specs[k].shape)
        else v
        for k, v in placed.items()
    }
    check_shapes(
        placed,
        {k: spec.shape for k, spec in specs.items()},
        f"{source} ConvNeXt weights (depths {config.depths}, dims {config.dims})",
        theirs=names.__getitem__,
        their_shape=_foreign_shape,
    )
    return fields, {k: np.asarray(placed[k], dtype=specs[k].dtype) for k in specs}


def _foreign_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape, 1, 1) if name.endswith("layer_scale") else shape


def _first(tensors: Mapping[str, Any], limit: int = 5) -> str:
    keys = list(tensors)
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


# ------------------------------------------------------------------------------------ writing


def zoo_to_torchvision(config: ConvNeXtConfig, tensors: Tensors) -> tuple[Tensors, None]:
    """Canonical tensors -> the state dict torchvision's ``ConvNeXt`` (of this shape; at the
    presets' shapes ``convnext_{tiny,small,base}()``) loads with ``strict=True``."""
    refusals = [
        (config.in_channels != 3, f"its stem reads 3 channels; this model reads {config.in_channels}"),
        (
            config.patch_size != 4,
            f"its stem cuts 4x4 patches; this model's patch_size is {config.patch_size}",
        ),
        (config.task != "classification", "it always has its classifier; this model is a features backbone"),
    ]
    reasons = [reason for refused, reason in refusals if refused]
    if reasons:
        raise ForeignLayoutError(
            f"torchvision's ConvNeXt cannot hold this model: {'; '.join(reasons)}. Export it as timm instead"
        )
    out = {}
    for ours, theirs in torchvision_names(config).items():
        value = tensors[ours]
        out[theirs] = value.reshape(*value.shape, 1, 1) if ours.endswith(".gamma") else value
    return out, None


def zoo_to_timm(
    config: ConvNeXtConfig, tensors: Tensors, preprocessing: Preprocessing | None = None
) -> tuple[Tensors, dict[str, Any]]:
    """Canonical tensors -> a timm ConvNeXt state dict and the ``config.json`` timm builds it from,
    with the checkpoint's ``preprocessing`` in its ``pretrained_cfg`` (and its label names)."""
    if config.patch_size == 2:
        raise ForeignLayoutError(
            "timm's ConvNeXt gives a 2x2-patch stem a first stage that downsamples again (its rule for "
            "stride-2 stems), another network than this one; patch sizes other than 2 export"
        )
    return {name: tensors[name] for name in _timm_names(config)}, timm_config(config, preprocessing)
